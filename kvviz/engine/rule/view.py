"""A compiled pool's KV memory, read-only: the read verbs RealKV (kvviz/kv/real.py), the
collector, the KV-event publisher and the Learn story read. PoolView reads any pool; KVView
is a lane's (kvviz/engine/lane.py), KVPool one driven directly (kvviz/engine/kvpool.py)."""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np
from numba import njit

from kvviz.core.admission import Usage
from kvviz.core.blockmap import FREE, BlockMap
from kvviz.engine.rule import state as S

if TYPE_CHECKING:
    from kvviz.engine.lane import Lane

PLACEMENTS = {code: name for name, code in S.PLACEMENT_CODE.items()}
STORED, REMOVED = "stored", "removed"  # PoolLog's entry kinds
Key = tuple[int, int]  # (hash as a signed 64-bit int, end): a cached block, as published
LogEntry = tuple[str, Key, "Key | None"]  # (STORED | REMOVED, key, parent key of a store)


class PoolView:
    """The read verbs over `src`'s pool, requests and config (read at each call: a pool that
    grows is replaced). A sequence id is a request index unless a subclass maps it
    (`_reqs`, `_names`)."""

    def __init__(self, src, label: str, bytes_per_token: int) -> None:
        cfg = src.cfg
        self.src = src
        self.contiguous = not cfg.paged
        self.block_size = cfg.block_size
        self.num_blocks = cfg.num_blocks
        self.label = label
        self.prefix_caching = bool(cfg.prefix_caching)
        self.bytes_per_token = bytes_per_token
        self.placement = None if cfg.paged else PLACEMENTS[cfg.placement]
        self.block_pool = PoolLog(src) if cfg.prefix_caching else None

    def _reqs(self, seq_ids) -> np.ndarray:
        return np.asarray(seq_ids, np.int64)

    def _names(self) -> np.ndarray | None:
        """The sequence id of each request index (None: the index itself)."""
        return None

    def _rows(self, seq_ids) -> np.ndarray:
        rows = self.src.req.row[self._reqs(seq_ids)]
        if rows.size and rows.min() < 0:
            raise KeyError(f"request {int(np.asarray(seq_ids)[np.argmin(rows)])} is not running")
        return rows

    def usage(self) -> Usage:
        p, bs = self.src.pool, self.block_size
        held = int(p.c[S.HELD_CELLS] if self.contiguous else p.c[S.NUM_HELD])
        cached = 0 if self.contiguous else int(p.c[S.LRU_COUNT])
        return Usage(self.src.cfg.capacity, int(p.c[S.NUM_USED]), held * bs, cached * bs,
                     int(p.c[S.EVICTIONS]))

    @property
    def prefix_hit_tokens(self) -> int:
        return int(self.src.pool.c[S.HIT_TOKENS])

    def seq_allocated_tokens(self, seq_ids) -> np.ndarray:
        return self.src.pool.row_num_blocks[self._rows(seq_ids)] * self.block_size

    def seq_len(self, seq_id: int) -> int:
        return int(self.src.pool.row_len[self._rows([seq_id])[0]])

    def block_table(self, seq_id: int) -> np.ndarray:
        row = self._rows([seq_id])[0]
        p = self.src.pool
        return p.block_table[row, :p.row_num_blocks[row]].copy()

    def block_tables(self, seq_ids) -> np.ndarray:
        """int32 [B, max blocks held]; entries past a sequence's blocks are 0 (unused)."""
        p, rows = self.src.pool, self._rows(seq_ids)
        nb = p.row_num_blocks[rows]
        width = int(nb.max()) if rows.size else 0
        out = p.block_table[rows, :width].copy()
        out[np.arange(width)[None, :] >= nb[:, None]] = 0
        return out

    def ranges(self, seq_ids) -> np.ndarray:
        """int64 [B, 2]: (first slot, reserved slots) of each sequence's range."""
        p, rows, g = self.src.pool, self._rows(seq_ids), self.block_size
        return np.stack([p.row_start[rows] * g, p.row_num_blocks[rows] * g], axis=1)

    def _blockmap(self, rows: np.ndarray) -> BlockMap:
        """Every block's (cell's) state, copied; `rows`: every row holding memory, in the
        order that names a shared block's owner (the first row holding it)."""
        p, bs, names = self.src.pool, self.block_size, self._names()
        seqs = p.row_seq[rows] if names is None else names[p.row_seq[rows]]
        if not self.contiguous:
            owner = np.full(self.num_blocks, FREE, np.int32)
            first_holders(p.block_table, p.row_num_blocks, p.ref_cnt, rows,
                          seqs.astype(np.int32), owner)
            owned = p.ref_cnt > 0
            filled = np.where(owned, bs, p.content).astype(np.int32)
            rows = rows[p.row_len[rows] % bs != 0]  # a row's only partly written block: its
            k = p.row_len[rows] // bs  # last (the rule holds ceil(row_len / bs) blocks)
            filled[p.block_table[rows, k]] = p.row_len[rows] - k * bs
            return BlockMap(owner=owner, filled=filled,
                            allocated=np.where(owned, bs, 0).astype(np.int32),
                            refcount=p.ref_cnt.astype(np.int16), cached=p.in_lru.copy(),
                            block_size=bs, bytes_per_token=self.bytes_per_token,
                            label=self.label, contiguous=False)
        n = self.num_blocks
        owner = np.full(n, FREE, np.int32)
        filled = np.zeros(n, np.int32)
        for seq, row in zip(seqs.tolist(), rows.tolist()):
            s, k = int(p.row_start[row]), int(p.row_num_blocks[row])
            owner[s:s + k] = seq
            filled[s:s + k] = np.clip(p.row_len[row] - np.arange(k) * bs, 0, bs)
        return BlockMap(owner=owner, filled=filled,
                        allocated=np.where(owner != FREE, bs, 0).astype(np.int32),
                        refcount=(owner != FREE).astype(np.int16),
                        cached=np.zeros(n, np.bool_), block_size=bs,
                        bytes_per_token=self.bytes_per_token, label=self.label,
                        contiguous=True, buddy=self.placement == "buddy")


@njit(cache=True)
def first_holders(block_table, row_num_blocks, ref_cnt, rows, seqs, owner):
    """A paged map's owners: each held block (ref_cnt > 0) in the tables of `rows` is owned
    by the first of them (in that order) whose table holds it, named seqs[i]; `owner` (FREE
    everywhere) is filled in. O(blocks in the tables), so the step keeps no owner per block.
    Held and free are the pool's own ref counts, so a table that disagrees with them shows
    (kvviz/kv/audit_layout.py)."""
    for i in range(rows.size):
        row = rows[i]
        for j in range(row_num_blocks[row]):
            b = block_table[row, j]
            if owner[b] == FREE and ref_cnt[b] > 0:
                owner[b] = seqs[i]


class KVView(PoolView):
    """A lane's memory: sequence ids are the workload's request indices."""

    def __init__(self, lane: Lane) -> None:
        super().__init__(lane, lane.spec.label, lane.bytes_per_token)

    def snapshot(self) -> BlockMap:
        """Every block's (cell's) state, copied, with the running requests' final lengths."""
        lane = self.src
        ids = lane.run_ids
        rows = lane.req.row[ids]
        bm = self._blockmap(rows)
        return replace(bm, final_seq=ids.astype(np.int32),
                       final_len=lane.final_len[ids].astype(np.int32),
                       final_held=(lane.pool.row_num_blocks[rows] * self.block_size
                                   ).astype(np.int64))


def _key(h, end) -> tuple[int, int]:
    """A block's key as the publisher names it: (its hash as a signed 64-bit int, end)."""
    return int(np.asarray(h, np.uint64).view(np.int64)), int(end)


class PoolLog:
    """A compiled pool's KV cache events (vLLM's BlockStored / BlockRemoved) as the publisher
    reads them (kvviz/node/kvevents/engine_source.py): start_log, drain_log, cached_keys."""

    def __init__(self, src) -> None:
        self.src = src

    def cached_keys(self) -> dict:
        """The keys cached now (live or free), each with its parent key (None: a first
        block)."""
        p, bs = self.src.pool, self.src.cfg.block_size
        out: dict = {}
        for b in np.flatnonzero(p.block_hash).tolist():
            end = int(p.block_end[b])
            parent = p.block_parent[b]
            out.setdefault(_key(p.block_hash[b], end),
                           None if parent == 0 else _key(parent, end - bs))
        return out

    def start_log(self) -> dict:
        """Log from now on; returns the keys cached now."""
        self.src.pool.c[S.NUM_KV_LOG] = 0
        self.src.pool.c[S.KV_LOG_ON] = 1
        return self.cached_keys()

    def drain_log(self) -> list[tuple]:
        """("stored", key, parent key) / ("removed", key, None) since the last drain."""
        p, bs = self.src.pool, self.src.cfg.block_size
        n = int(p.c[S.NUM_KV_LOG])
        out = []
        for kind, h, end, parent in zip(p.kv_kind[:n].tolist(), p.kv_hash[:n],
                                        p.kv_end[:n].tolist(), p.kv_parent[:n]):
            if kind == 1:
                out.append((STORED, _key(h, end),
                            None if parent == 0 else _key(parent, end - bs)))
            else:
                out.append((REMOVED, _key(h, end), None))
        p.c[S.NUM_KV_LOG] = 0
        return out
