"""Real mode: the allocator's block ids (or ranges) index real K/V tensors.

The engine calls prefill (`on_admit`) and decode (`on_decode`) after the allocator has
placed the tokens. K, V and q are synthetic but deterministic: token (seq_id, position) is
hashed into a small hidden state, and fixed random projections per layer turn it into K, V
and q (all heads at once). So the same run writes the same bytes on every machine, no model
is needed, and the expected content of every written slot is known without reading the pool
(`expected_kv`; kvviz/kv/audit.py checks the pools against it). Positions inside a prompt's
block-hash chain (`bind_workload`) are keyed by the chain block's id instead of the sequence,
so a block shared through prefix caching holds the same K/V for every sequence using it.
"""
from __future__ import annotations

import numpy as np
import torch

from kvviz.core.config import ModelShape
from kvviz.kv.attention import contiguous_decode_attention, paged_decode_attention
from kvviz.kv.cache import ContiguousKVCache, PagedKVCache

HIDDEN = 16  # width of the hashed hidden state
_MUL1 = 0x5851F42D4C957F2D  # odd 64-bit constants (fit in int64) for the hash mix
_MUL2 = 0x2545F4914F6CDD1D


class RealKV:
    """K/V pools behind one allocator, written and attended every engine step."""

    def __init__(self, allocator, model: ModelShape, device="cpu", seed: int = 0, dtype=None,
                 backend: str = "auto") -> None:
        self.allocator = allocator
        self.model = model
        self.device = torch.device(device)
        self.backend = backend
        self.paged = not allocator.contiguous
        capacity = int(allocator.usage().capacity_tokens)
        if self.paged:
            self.block_size = int(allocator.block_size)
            self.cache: PagedKVCache | ContiguousKVCache = PagedKVCache(
                capacity // self.block_size, self.block_size, model, self.device, dtype)
        else:
            self.cache = ContiguousKVCache(capacity, model, self.device, dtype)
        self.dtype = self.cache.dtype
        self.device = self.cache.device
        self.slots = self.cache.slots_per_layer
        g = torch.Generator().manual_seed(seed)
        kvh, h, d, n = model.num_kv_heads, model.num_heads, model.head_dim, model.num_layers
        # per layer projections hidden -> K, V, q; scaled so scores stay O(1)
        self._wk = (torch.randn(n, HIDDEN, kvh * d, generator=g) / HIDDEN ** 0.5).to(self.device)
        self._wv = (torch.randn(n, HIDDEN, kvh * d, generator=g) / HIDDEN ** 0.5).to(self.device)
        self._wq = (torch.randn(n, HIDDEN, h * d, generator=g) / HIDDEN ** 0.5).to(self.device)
        self._salt = torch.arange(1, HIDDEN + 1, dtype=torch.int64, device=self.device)
        self._seed = int(seed) & 0xFFFFFFFF
        # the workload's prompts as block-hash chains (Workload.chains) and prompt lengths
        self._chains: tuple[np.ndarray, np.ndarray, int] | None = None
        self._prompt = np.zeros(0, np.int64)
        self.last_q: list[torch.Tensor] = []  # per layer [B, H, D] from the last decode step
        self.last_outputs: list[torch.Tensor] = []  # per layer [B, H, D]
        self.kv_bytes_read = 0  # K/V bytes the last decode step's attention read
        self.kv_bytes_read_total = 0

    @property
    def pool_bytes(self) -> int:
        return self.cache.nbytes

    @property
    def last_output(self) -> torch.Tensor | None:
        return self.last_outputs[-1] if self.last_outputs else None

    # ---- synthetic activations -------------------------------------------------------------
    def bind_workload(self, w) -> None:
        """Positions inside a prompt's hash chain (kvviz.core.workload.Workload.chains: block i's
        id stands for the whole prefix up to it) are keyed by that block's id, so requests
        whose chains match write identical K/V there, as identical text would."""
        self._chains = w.chains() if w.has_chains else None
        self._prompt = np.asarray(w.prompt, dtype=np.int64)

    def content_key(self, seq: np.ndarray, pos: np.ndarray) -> np.ndarray:
        """int64 [n]: whose content token (seq, pos) is: the sequence id, or -(1 + the chain
        block's id mod 2^40) inside the prompt's hash chain."""
        seq = np.asarray(seq, dtype=np.int64)
        if self._chains is None or not seq.size:
            return seq
        ptr, ids, block = self._chains
        pos = np.asarray(pos, dtype=np.int64)
        known = (seq >= 0) & (seq < self._prompt.size)
        s = np.where(known, seq, 0)
        j = pos // block
        inside = known & (j < ptr[s + 1] - ptr[s]) & (pos < self._prompt[s])
        if not ids.size or not inside.any():
            return seq
        h = ids[np.where(inside, ptr[s] + j, 0)] % (1 << 40)
        return np.where(inside, -(1 + h), seq)

    def expected_kv(self, seq: np.ndarray, pos: np.ndarray,
                    layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """K, V [n, kv_heads, head_dim] (float32, on the pool's device) that token (seq, pos)
        writes at `layer`: what its slot must hold, computed from the generator alone."""
        return self._kv(self._hidden(seq, pos, stream=0), layer)

    def expected_hidden(self, seq: np.ndarray, pos: np.ndarray) -> torch.Tensor:
        """[n, HIDDEN]: the hashed inputs whose projections by `kv_weights` are K and V."""
        return self._hidden(seq, pos, stream=0)

    def token_keys(self, seq: np.ndarray, pos: np.ndarray) -> np.ndarray:
        """int64 [n]: the generator's whole input for the K/V of token (seq, pos): two tokens
        with equal keys write equal K/V (a memo of expected values may be keyed by it)."""
        return self.content_key(seq, pos) * 1_000_003 + np.asarray(pos, dtype=np.int64)

    def hidden_of_keys(self, keys: np.ndarray) -> torch.Tensor:
        """`expected_hidden` from `token_keys`."""
        return self._hash(torch.from_numpy(np.asarray(keys, np.int64)), 0)

    @property
    def kv_weights(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The fixed projections hidden -> K and hidden -> V, [layers, HIDDEN, kv_heads * D]."""
        return self._wk, self._wv

    def expected_q(self, seq: np.ndarray, pos: np.ndarray) -> list[torch.Tensor]:
        """Per layer q [n, heads, head_dim] in the pool dtype of the decode step that wrote
        (seq, pos) as its newest token."""
        hq = self._hidden(seq, pos, stream=1)
        shape = (hq.shape[0], self.model.num_heads, self.model.head_dim)
        return [(hq @ self._wq[layer]).view(shape).to(self.dtype)
                for layer in range(self.model.num_layers)]

    def _hidden(self, seq: np.ndarray, pos: np.ndarray, stream: int) -> torch.Tensor:
        """[n, HIDDEN] uniform in [-1, 1), a pure function of (seed, stream, content, pos)."""
        seq = self.content_key(seq, pos) if stream == 0 else np.asarray(seq, dtype=np.int64)
        key = torch.from_numpy(seq.astype(np.int64) * 1_000_003 + pos.astype(np.int64))
        return self._hash(key, stream)

    def _hash(self, key: torch.Tensor, stream: int) -> torch.Tensor:
        key = key.to(self.device) * 4 + stream + (self._seed << 20)
        x = key[:, None] * _MUL1 + self._salt[None, :] * _MUL2  # wraps mod 2^64: deterministic
        x = x ^ (x >> 29)
        x = x * _MUL2
        x = x ^ (x >> 32)
        u = ((x >> 8) & 0xFFFFFF).to(torch.float32) * (2.0 / (1 << 24)) - 1.0
        return u

    def _kv(self, h: torch.Tensor, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        shape = (h.shape[0], self.model.num_kv_heads, self.model.head_dim)
        return (h @ self._wk[layer]).view(shape), (h @ self._wv[layer]).view(shape)

    def _write(self, seq: np.ndarray, pos: np.ndarray, slots: np.ndarray) -> None:
        if slots.size and (slots.min() < 0 or slots.max() >= self.slots):
            raise ValueError(f"slots {slots.min()}..{slots.max()} outside the pool of "
                             f"{self.slots} (allocator and cache disagree)")
        slot_t = torch.from_numpy(slots.astype(np.int64)).to(self.device)
        h = self._hidden(seq, pos, stream=0)
        for layer in range(self.model.num_layers):
            k, v = self._kv(h, layer)
            self.cache.write(layer, slot_t, k, v, check=False)

    def _slots(self, seq_ids: np.ndarray, rows: np.ndarray, pos: np.ndarray, arg: str):
        """Flat slots of tokens (seq_ids[rows], pos); also the index the attention needs."""
        if self.paged:
            tables = np.asarray(self.allocator.block_tables(seq_ids), dtype=np.int32)
            if tables.size and (tables.min() < 0 or tables.max() >= self.cache.num_blocks):
                raise ValueError(f"block_tables: ids {tables.min()}..{tables.max()} outside "
                                 f"0..{self.cache.num_blocks - 1} (allocator and cache disagree)")
            held = getattr(self.allocator, "seq_allocated_tokens", None)  # exact, if offered
            room = (np.asarray(held(seq_ids))[rows] if held is not None
                    else tables.shape[1] * self.block_size)
            index = tables
        else:
            ranges = np.asarray(self.allocator.ranges(seq_ids), dtype=np.int64).reshape(-1, 2)
            room = ranges[rows, 1]
            index = ranges[:, 0]
        if pos.size and (pos >= room).any():
            i = int(np.argmax(pos >= room))
            raise ValueError(f"{arg}: sequence {int(seq_ids[rows[i]])} position {int(pos[i])} "
                             f"lies past the memory its allocator holds")
        if self.paged:
            slots = self.cache.slot_mapping(tables, pos, rows)
        else:
            slots = index[rows] + pos
        return slots, index

    # ---- phases ----------------------------------------------------------------------------
    def on_admit(self, seq_ids: list[int], num_tokens: list[int],
                 starts: list[int] | None = None) -> None:
        """Prefill: write K/V of positions start..start+n-1 of each sequence (start 0 unless
        given: a chunk of a prompt, or the tokens after a prefix hit)."""
        ids = np.asarray(seq_ids, dtype=np.int64)
        counts = np.asarray(num_tokens, dtype=np.int64)
        if ids.size == 0 or counts.sum() == 0:
            return
        rows = np.repeat(np.arange(ids.size), counts)
        pos = np.arange(rows.size) - np.repeat(np.cumsum(counts) - counts, counts)
        if starts is not None:
            pos = pos + np.repeat(np.asarray(starts, dtype=np.int64), counts)
        slots, _ = self._slots(ids, rows, pos, "num_tokens")
        self._write(ids[rows], pos, slots)

    def on_decode(self, seq_ids: np.ndarray, lens: np.ndarray) -> None:
        """One decode step: write position len-1 of each sequence, attend over 0..len-1.

        `lens`: each sequence's length after this step's append (the allocator already
        holds room for it). Outputs are kept in `last_outputs` (one [B, H, D] per layer).
        """
        ids = np.asarray(seq_ids, dtype=np.int64)
        lens = np.asarray(lens, dtype=np.int64)
        if ids.size == 0:
            self.last_q, self.last_outputs, self.kv_bytes_read = [], [], 0
            return
        if lens.min() < 1:
            raise ValueError(f"lens: every length must be >= 1, got {int(lens.min())}")
        rows = np.arange(ids.size)
        slots, index = self._slots(ids, rows, lens - 1, "lens")
        self._write(ids, lens - 1, slots)
        lens_t = torch.from_numpy(lens.astype(np.int32)).to(self.device)
        index_t = torch.from_numpy(index).to(self.device)
        hq = self._hidden(ids, lens - 1, stream=1)
        heads, d = self.model.num_heads, self.model.head_dim
        check = self.device.type == "cpu"  # on CUDA the host-side checks above suffice
        attend = paged_decode_attention if self.paged else contiguous_decode_attention
        self.last_q, self.last_outputs = [], []
        for layer in range(self.model.num_layers):
            q = (hq @ self._wq[layer]).view(ids.size, heads, d).to(self.dtype)
            out = attend(q, self.cache.k[layer], self.cache.v[layer], index_t, lens_t,
                         backend=self.backend, check_values=check)
            self.last_q.append(q)
            self.last_outputs.append(out)
        self.kv_bytes_read = int(lens.sum()) * self.cache.bytes_per_token
        self.kv_bytes_read_total += self.kv_bytes_read
