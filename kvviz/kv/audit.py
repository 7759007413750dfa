"""Real mode audited: the K/V pools checked against the block map and the generator.

At a sample, for one lane (an allocator, its RealKV pools and its live sequences):

    content    every written slot (positions 0..len-1 of every live sequence, found through
               its block table or range) holds, in every layer, the K/V the generator gives
               for (sequence, position): `RealKV.expected_kv`, never read from the pool
    tables     paged: refcounts equal the tables holding each block, free and cached blocks
               are in no table (kvviz/kv/audit_layout.py)
    ranges     contiguous: ranges do not overlap and their cells are owned by their sequence
               (kvviz/kv/audit_layout.py)
    attention  for one sequence (more with attention_samples; rotating over the live set
               from sample to sample), decode attention over the pool (the lane's kernel,
               through its tables) equals a float32 reference built from the generator's K/V
               and q

Everything is vectorized: the content check fingerprints every slot of the pools in one
streaming pass (a matrix-vector product per layer), hashes the written tokens' inputs once,
projects them, and compares the two at the written slots; one host copy of a boolean mask per
sample. `AuditResult.checks` counts checks (one per written slot, per block or cell, per
sampled (sequence, layer)); `failures` lists the first few failures with a reason.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from kvviz.core.blockmap import BlockMap
from kvviz.kv.attention import contiguous_decode_attention, paged_decode_attention
from kvviz.kv.audit_layout import AuditFailure, AuditResult, Found, check_ranges, check_tables

__all__ = ["AuditFailure", "AuditResult", "Auditor"]
CHUNK_SLOTS = 1 << 16  # written slots hashed at once (bounds the audit's scratch memory)
CHUNK_VALUES = 1 << 24  # pool values converted to float32 at once when fingerprinting
PRINT_SEED = 0x6B76  # the fingerprint vectors' seed
# Tolerances: a slot's fingerprint against the generator's, per sqrt(values in a slot) (one
# rounding to the pool dtype moves it by ~eps * |K| * sqrt(n) at most a few times); the
# kernel's attention output against the float32 reference (absolute)
CONTENT_TOL = {torch.float32: 1e-4, torch.bfloat16: 1e-2, torch.float16: 2e-3}
ATTENTION_TOL = {torch.float32: 1e-4, torch.bfloat16: 3e-2, torch.float16: 4e-3}


class _Prints:
    """Seeded random projections: slot content at layer l -> one number, K . r_l (or V . r_l).
    The generator's K is h @ W_l, so its fingerprint is h @ (W_l r_l): a [HIDDEN] vector per
    layer, with no K/V to materialize. Any change to a slot larger than the dtype's rounding
    moves the fingerprint (unless exactly orthogonal to a random vector: probability 0)."""

    def __init__(self, kv, seed: int = PRINT_SEED) -> None:
        g = torch.Generator().manual_seed(seed)
        layers = kv.model.num_layers
        self.width = kv.model.num_kv_heads * kv.model.head_dim
        wk, wv = kv.kv_weights  # [layers, HIDDEN, width]
        self.rk = torch.randn(layers, self.width, 1, generator=g).to(kv.device)
        self.rv = torch.randn(layers, self.width, 1, generator=g).to(kv.device)
        self.uk = torch.bmm(wk, self.rk)[:, :, 0].T.contiguous()  # [HIDDEN, layers]
        self.uv = torch.bmm(wv, self.rv)[:, :, 0].T.contiguous()


class _Memo:
    """The generator's fingerprints of the token last seen at each slot, keyed by the token's
    generator input (RealKV.token_keys): a pure function of the key, so a slot is hashed again
    only when a different token is expected there (new tokens, reused blocks). Never filled
    from the pool."""

    def __init__(self, kv, prints: _Prints) -> None:
        self.key = np.full(kv.slots, np.iinfo(np.int64).min, np.int64)
        self.prints = torch.zeros(kv.slots, 2 * kv.model.num_layers, device=kv.device)
        self.u = torch.cat([prints.uk, prints.uv], dim=1)  # [HIDDEN, 2 * layers]
        self.hashed = 0  # tokens hashed so far (tests, benchmarks)

    def expected(self, kv, keys: np.ndarray, slots: np.ndarray) -> torch.Tensor:
        """[n, 2 * layers]: K then V fingerprints the generator gives token keys[i]."""
        out = self.prints[torch.from_numpy(slots).to(kv.device)]
        miss = np.flatnonzero(self.key[slots] != keys)
        if miss.size:
            fresh = torch.cat([kv.hidden_of_keys(keys[miss[lo:lo + CHUNK_SLOTS]]) @ self.u
                               for lo in range(0, miss.size, CHUNK_SLOTS)])
            out[torch.from_numpy(miss).to(kv.device)] = fresh
            # memoize one token per slot (the last seen), its key and prints together: two
            # tokens expected in one slot (a fault) must not leave a key with another's prints
            s = slots[miss]
            last = s.size - 1 - np.unique(s[::-1], return_index=True)[1]
            self.key[s[last]] = keys[miss[last]]
            self.prints[torch.from_numpy(s[last]).to(kv.device)] = fresh[
                torch.from_numpy(last).to(kv.device)]
            self.hashed += int(miss.size)
        return out


class Auditor:
    """Audits one lane's pools at each sample; cheap to keep (a few [HIDDEN, layers] vectors).

    `attend` replaces the lane's decode attention (tests inject faults through it)."""

    def __init__(self, kv, attention_samples: int = 1, attend: Callable | None = None) -> None:
        self.kv = kv
        self.attention_samples = attention_samples
        self.attend = attend
        self.prints = _Prints(kv)
        self.memo = _Memo(kv, self.prints)
        self.samples = 0

    def audit(self, seq_ids: np.ndarray, lens: np.ndarray, blockmap: BlockMap,
              id_offset: int = 0) -> AuditResult:
        """`seq_ids`, `lens`: the live sequences and the tokens each has written;
        `blockmap`: the allocator's snapshot at this instant; failures name sequences as
        id + `id_offset` (the collector's run-wide ids under --loop)."""
        kv = self.kv
        ids = np.asarray(seq_ids, dtype=np.int64)
        lens = np.asarray(lens, dtype=np.int64)
        found = Found(id_offset)
        alloc = kv.allocator
        if kv.paged:
            tables = (np.asarray(alloc.block_tables(ids), dtype=np.int64) if ids.size
                      else np.zeros((0, 1), np.int64))
            nblocks = np.asarray(alloc.seq_allocated_tokens(ids), np.int64) // kv.block_size
            check_tables(found, ids, tables, nblocks, blockmap)
            index = tables
        else:
            ranges = np.asarray(alloc.ranges(ids), dtype=np.int64).reshape(-1, 2)
            check_ranges(found, ids, lens, ranges, blockmap)
            index = ranges[:, 0]
        if ids.size:
            _check_content(found, kv, self.prints, self.memo, ids, lens, index)
            _check_attention(found, kv, ids, lens, index, self.samples,
                             self.attention_samples, self.attend)
        self.samples += 1
        return found.result()


def _written(kv, ids, lens, index) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(row, position, flat slot) of every written token of every live sequence."""
    rows = np.repeat(np.arange(ids.size), lens)
    pos = np.arange(rows.size) - np.repeat(np.cumsum(lens) - lens, lens)
    if kv.paged:  # a position past the table's blocks (a fault) gets slot -1
        col = pos // kv.block_size
        held = col < index.shape[1]
        slots = index[rows, np.where(held, col, 0)] * kv.block_size + pos % kv.block_size
        slots = np.where(held, slots, -1)
    else:
        slots = index[rows] + pos
    return rows, pos, slots


def _pool_prints(pool: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """[layers, slots] fingerprints of every slot of `pool` ([layers, ..., kv_heads, D]): one
    streaming pass over the pool (cheaper than gathering the written slots one by one)."""
    layers, width = pool.shape[0], r.shape[1]
    flat = pool.view(layers, -1, width)
    out = torch.empty(flat.shape[:2], dtype=torch.float32, device=pool.device)
    step = max(1, CHUNK_VALUES // width)
    for layer in range(layers):
        for lo in range(0, flat.shape[1], step):
            out[layer, lo:lo + step] = flat[layer, lo:lo + step].float() @ r[layer, :, 0]
    return out


def _check_content(found: Found, kv, prints: _Prints, memo: _Memo, ids, lens,
                   index) -> None:
    rows, pos, slots = _written(kv, ids, lens, index)
    inside = (slots >= 0) & (slots < kv.slots)
    tol = CONTENT_TOL[kv.dtype] * prints.width ** 0.5
    got_k = _pool_prints(kv.cache.k_all, prints.rk)  # [layers, slots]
    got_v = _pool_prints(kv.cache.v_all, prints.rv)
    at = np.where(inside, slots, 0)
    keys = kv.token_keys(ids[rows], pos)
    if not inside.all():  # a slot outside the pool: its check fails, nothing is memoized
        keys = np.where(inside, keys, memo.key[0])
    want = memo.expected(kv, keys, at)  # [n, 2 * layers]: the generator's K, V projected
    where = torch.from_numpy(at).to(kv.device)
    got = torch.cat([got_k[:, where], got_v[:, where]]).T
    bad = ((got - want).abs() > tol).any(1)
    bad_host = bad.cpu().numpy() | ~inside

    def describe(i: int) -> AuditFailure:
        seq, p, s = found.sid(int(ids[rows[i]])), int(pos[i]), int(slots[i])
        where = (f"block {s // kv.block_size} offset {s % kv.block_size}" if kv.paged
                 else f"slot {s}")
        if not inside[i]:
            return AuditFailure(seq, "content", f"sequence {seq} position {p}: slot {s} lies "
                                                f"outside the pool of {kv.slots} slots")
        return AuditFailure(seq, "content", f"sequence {seq} position {p} ({where}): the pool "
                                            "does not hold its K/V")
    found.add(slots.size, np.flatnonzero(bad_host), describe)


def _check_attention(found: Found, kv, ids, lens, index, sample_no: int, k: int,
                     attend: Callable | None) -> None:
    k = min(k, ids.size)
    if k <= 0:
        return
    pick = np.unique((np.arange(k) * ids.size // k + sample_no) % ids.size)
    # a sequence whose table or range leaves the pool was reported above: the kernel (no
    # value checks here) must not be handed it
    _, _, slots = _written(kv, ids[pick], lens[pick], index[pick])
    if slots.size and (slots.min() < 0 or slots.max() >= kv.slots):
        return
    seqs, n = ids[pick], lens[pick]
    if kv.paged:
        width = int((-(-n // kv.block_size)).max())
        idx_t = torch.from_numpy(index[pick, :width].astype(np.int32)).to(kv.device)
        attend = attend or paged_decode_attention
    else:
        idx_t = torch.from_numpy(index[pick]).to(kv.device)
        attend = attend or contiguous_decode_attention
    lens_t = torch.from_numpy(n.astype(np.int32)).to(kv.device)
    q = torch.stack(kv.expected_q(seqs, n - 1))  # [layers, k, H, D], pool dtype
    out = torch.stack([attend(q[layer], kv.cache.k[layer], kv.cache.v[layer], idx_t, lens_t,
                              backend=kv.backend, check_values=False)
                       for layer in range(q.shape[0])]).float()
    layers, kvh, d = q.shape[0], kv.model.num_kv_heads, kv.model.head_dim
    rows = np.repeat(np.arange(pick.size), n)
    pos = np.arange(rows.size) - np.repeat(np.cumsum(n) - n, n)
    h = kv.expected_hidden(seqs[rows], pos)  # [T, HIDDEN], all picked tokens
    wk, wv = kv.kv_weights
    # the generator's K, V of every layer, rounded as the pool stores them: [layers, T, kvh, D]
    keys = (h @ wk).view(layers, -1, kvh, d).to(kv.dtype).float()
    vals = (h @ wv).view(layers, -1, kvh, d).to(kv.dtype).float()
    qg = q.float().view(layers, pick.size, kvh, -1, d)  # GQA: query heads grouped per kv head
    err = torch.zeros(pick.size, layers, device=kv.device)
    for b, (lo, hi) in enumerate(zip((np.cumsum(n) - n).tolist(), np.cumsum(n).tolist())):
        w = torch.einsum("lkgd,ltkd->lkgt", qg[:, b], keys[:, lo:hi]) * d ** -0.5
        ref = torch.einsum("lkgt,ltkd->lkgd", torch.softmax(w, dim=-1), vals[:, lo:hi])
        err[b] = (out[:, b] - ref.reshape(layers, -1, d)).abs().amax(dim=(1, 2))
    bad = (err > ATTENTION_TOL[kv.dtype]).cpu().numpy().reshape(-1)
    errs = err.cpu().numpy().reshape(-1)

    def describe(i: int) -> AuditFailure:
        s, layer = found.sid(int(seqs[i // layers])), i % layers
        return AuditFailure(s, "attention", f"sequence {s} layer {layer}: decode attention "
                                            f"over the pool differs from the reference built "
                                            f"from the generator by {errs[i]:.3g}")
    found.add(bad.size, np.flatnonzero(bad), describe)
