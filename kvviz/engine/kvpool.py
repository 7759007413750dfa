"""A KV pool driven one verb at a time, without the scheduler: Learn's demos, real mode's
benchmark and the allocator tests admit, grow and release sequences themselves.

Every verb is one call into the compiled rule (rule/direct.py over kv.admit / kv.grow /
kv.free, the functions the scheduler calls), so the placements are a lane's: vLLM's free
block queue, prefix hash chains, LRU eviction, ref counts; first-fit, best-fit, buddy.
Each admission is a fresh request of the rule, named by the caller's sequence id; its
content is its prefix chain, then tokens of its own. The rule's arrays have fixed sizes:
more rows, wider block tables, more requests or log room mean a larger copy replacing them.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from kvviz.core.admission import Admission, Reason
from kvviz.core.blockmap import BlockMap
from kvviz.core.config import LaneSpec
from kvviz.engine.rule import build
from kvviz.engine.rule import state as S
from kvviz.engine.rule.direct import check, grow_batch, release, try_admit
from kvviz.engine.rule.view import PoolView

REASONS = (None, Reason.CAPACITY, Reason.FRAGMENTATION, Reason.POLICY)  # the rule's codes


class Prefix(NamedTuple):
    """A prompt's content as a hash chain (as kvviz.core.workload's): ids[i] names the
    prompt's tokens [0, (i + 1) * chain_block) (the pool's chain_block); its first `length`
    tokens are the chain's, the rest the sequence's own."""

    ids: Sequence[int]
    length: int


class KVPool(PoolView):
    """A paged pool (LaneSpec("paged", block_size, prefix_caching=...)) or a contiguous one
    (LaneSpec("contiguous", cell_tokens, placement)) over `capacity_tokens` slots."""

    def __init__(self, spec: LaneSpec, capacity_tokens: int, *, chain_block: int | None = None,
                 bytes_per_token: int = 0, label: str | None = None) -> None:
        bs, paged = spec.block_size, spec.allocator == "paged"
        nb = int(capacity_tokens) // bs
        if nb < 1:
            raise ValueError(f"capacity_tokens: {capacity_tokens} is below one block of {bs}")
        self.cfg = S.Config(
            n=0, paged=paged, prefix_caching=bool(spec.prefix_caching),
            placement=S.PLACEMENT_CODE[spec.placement], block_size=bs, num_blocks=nb,
            capacity=nb * bs, max_num_seqs=0, max_num_batched_tokens=0,
            enable_chunked_prefill=False, watermark_blocks=0, step_ms=0.0,
            chain_block=int(chain_block or bs))
        self.pool = build.pool(self.cfg, 8, min(nb, 16))
        z = np.zeros(16, np.int64)
        self.req = S.Requests(z, z.copy(), z.copy(), z.copy(), np.zeros(16, np.bool_),
                              z.copy(), z.copy(), z.copy(), z.copy(), np.full(16, -1, np.int64),
                              np.zeros(17, np.int64), z.copy(), z.copy())
        self._seq = np.full(16, -1, np.int64)  # per request: its sequence id
        self._live: dict[int, int] = {}  # sequence id -> request
        self._n = 0  # requests so far
        super().__init__(self, label or spec.label, bytes_per_token)

    # ---- names -----------------------------------------------------------------------------
    def _reqs(self, seq_ids) -> np.ndarray:
        live = self._live
        try:
            return np.array([live[s] for s in np.asarray(seq_ids, np.int64).tolist()], np.int64)
        except KeyError as e:
            raise KeyError(f"sequence {e.args[0]} is not live") from None

    def _names(self) -> np.ndarray:
        return self._seq

    def snapshot(self) -> BlockMap:
        """Every block's (cell's) state, copied, owners named by sequence id."""
        return self._blockmap(self.req.row[np.fromiter(self._live.values(), np.int64)])

    # ---- verbs -----------------------------------------------------------------------------
    def check(self, tokens: int, reserve: int | None = None) -> Admission:
        """What admit would answer for a sequence without a prefix; changes nothing."""
        r = self._request(-1, int(tokens), reserve, None)
        ok, why, need, free, largest = check(self.pool, self.cfg, self.req, r)
        return Admission(bool(ok), REASONS[why], int(need), int(free), int(largest))

    def admit(self, seq: int, tokens: int, reserve: int | None = None,
              prefix: Prefix | None = None) -> Admission:
        """A new sequence whose first `tokens` slots are written now, holding at least
        `reserve` slots (contiguous only); its leading full blocks cached under `prefix`'s
        chain are hits (paged, prefix caching). Refused: nothing changes, the reason says
        why. Raises ValueError for a live `seq` or a bad size."""
        seq, tokens = int(seq), int(tokens)  # (the compiled verbs take int64 only)
        if seq < 0 or seq in self._live:
            raise ValueError(f"sequence {seq} is already live" if seq >= 0
                             else f"seq: must be >= 0, got {seq}")
        r = self._request(seq, tokens, reserve, prefix)
        self._room(-(-tokens // self.block_size), 1)
        ok, why, need, free, largest, _ = try_admit(self.pool, self.cfg, self.req, r, tokens)
        if ok:
            self._live[seq] = r
            self._n += 1
        return Admission(bool(ok), REASONS[why], int(need), int(free), int(largest))

    def append(self, seq: int, tokens: int = 1) -> bool:
        """`tokens` more slots written by a live sequence, its memory grown where needed
        (vLLM's allocate_slots); False, and nothing changed, when memory does not suffice."""
        return bool(self.append_batch([seq], tokens)[0])

    def append_batch(self, seq_ids, tokens: int = 1) -> np.ndarray:
        """append for each sequence in order (earlier ones get memory first): bool per one."""
        if tokens < 1:
            raise ValueError(f"tokens must be >= 1, got {tokens}")
        rs = self._reqs(seq_ids)
        if rs.size:
            p = self.pool
            top = int(p.row_len[self.req.row[rs]].max()) + tokens
            self._room(-(-top // self.block_size), rs.size)
        ok = np.zeros(rs.size, np.bool_)
        grow_batch(self.pool, self.cfg, self.req, rs, int(tokens), ok)
        return ok

    def release(self, seq: int) -> None:
        """Free everything the sequence holds (vLLM's free: its blocks tail first)."""
        r = self._reqs([seq])[0]
        del self._live[seq]
        release(self.pool, self.cfg, self.req, r)

    # ---- room in the rule's arrays ---------------------------------------------------------
    def _request(self, seq: int, tokens: int, reserve: int | None,
                 prefix: Prefix | None) -> int:
        """The next request's entry (taken by a successful admit)."""
        if tokens < 1:
            raise ValueError(f"tokens must be >= 1, got {tokens}")
        if reserve is not None and (reserve < tokens or not self.contiguous):
            raise ValueError(f"reserve: {reserve} is below tokens {tokens}" if self.contiguous
                             else "reserve: a paged pool takes blocks as tokens are written")
        ids = np.asarray(() if prefix is None else prefix.ids, np.int64)
        r = self._n
        req = self.req
        if r + 1 >= req.chain_ptr.size or req.chain_ptr[r] + ids.size > req.chain_ids.size:
            self._more_requests(ids.size)
            req = self.req
        base = int(req.chain_ptr[r])
        req.chain_ids[base:base + ids.size] = ids
        req.chain_ptr[r + 1] = base + ids.size
        cover = 0 if prefix is None else min(prefix.length, ids.size * self.cfg.chain_block)
        req.chain_cover[r] = min(cover, tokens)
        req.prompt[r] = req.num_tokens[r] = tokens
        req.reserve[r] = reserve or 0
        self._seq[r] = seq
        return r

    def _more_requests(self, ids: int) -> None:
        req, n = self.req, self.req.row.size
        grown = {f: np.concatenate([a, np.full_like(a, -1 if f == "row" else 0)])
                 for f, a in zip(S.Requests._fields, req) if a.size == n}
        grown["chain_ptr"] = np.concatenate([req.chain_ptr, np.zeros(n, np.int64)])
        grown["chain_ids"] = np.concatenate(
            [req.chain_ids, np.zeros(max(req.chain_ids.size, ids), np.int64)])
        self.req = req._replace(**grown)
        self._seq = np.concatenate([self._seq, np.full(n, -1, np.int64)])

    def _room(self, blocks: int, seqs: int) -> None:
        """Room for a verb on `seqs` sequences of up to `blocks` blocks each: a free row, a
        block table that wide, KV event columns for what it may cache and evict."""
        p = self.pool
        rows, width = p.row_seq.size, p.block_table.shape[1]
        need = min(blocks, self.num_blocks) if self.cfg.paged else 1
        full = p.c[S.NUM_FREE_ROWS] == 0
        if full or need > width:
            self._resize(2 * rows if full else rows,
                         width if need <= width else min(max(need, 2 * width), self.num_blocks))
            p = self.pool
        events = 2 * seqs * (blocks + 1)
        if p.c[S.KV_LOG_ON] and p.kv_kind.size - p.c[S.NUM_KV_LOG] < events:
            k = int(p.c[S.NUM_KV_LOG])
            self.pool = p._replace(**build.kept(
                build.kv_events(max(2 * p.kv_kind.size, k + events)), p, k))

    def _resize(self, rows: int, width: int) -> None:
        """The pool with `rows` rows of `width` blocks, the old ones' contents kept."""
        old, fresh = self.pool, build.pool(self.cfg, rows, width)
        out = {}
        for f, a, b in zip(S.Pool._fields, old, fresh):
            if a.shape == b.shape or b.size < a.size:
                out[f] = a
            else:
                b[tuple(slice(0, k) for k in a.shape)] = a
                out[f] = b
        k, r0 = int(old.c[S.NUM_FREE_ROWS]), old.row_seq.size
        out["free_rows"][:k + rows - r0] = np.concatenate(
            [np.arange(rows - 1, r0 - 1, -1), old.free_rows[:k]])
        old.c[S.NUM_FREE_ROWS] = k + rows - r0
        self.pool = S.Pool(**out)
