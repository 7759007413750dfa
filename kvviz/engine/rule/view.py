"""A compiled lane's KV memory, read-only, with the allocator's read verbs (kvviz.alloc.base):
what RealKV (kvviz/kv/real.py), the collector and the KV-event publisher read."""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from kvviz.alloc.base import Usage
from kvviz.core.blockmap import FREE, BlockMap
from kvviz.engine.rule import state as S

if TYPE_CHECKING:
    from kvviz.engine.lane import Lane


class KVView:
    def __init__(self, lane: Lane) -> None:
        self.lane = lane
        spec = lane.spec
        self.contiguous = spec.allocator != "paged"
        self.block_size = spec.block_size
        self.label = spec.label
        self.prefix_caching = bool(spec.prefix_caching)
        self.bytes_per_token = lane.bytes_per_token
        self.num_blocks = lane.cfg.num_blocks
        self.placement = None if spec.allocator == "paged" else spec.placement
        self.block_pool = PoolLog(lane) if self.prefix_caching else None

    def _rows(self, seq_ids) -> np.ndarray:
        rows = self.lane.req.row[np.asarray(seq_ids, np.int64)]
        if rows.size and rows.min() < 0:
            raise KeyError(f"request {int(np.asarray(seq_ids)[np.argmin(rows)])} is not running")
        return rows

    def usage(self) -> Usage:
        p, bs = self.lane.pool, self.block_size
        held = int(p.c[S.HELD_CELLS] if self.contiguous else p.c[S.NUM_HELD])
        cached = 0 if self.contiguous else int(p.c[S.LRU_COUNT])
        return Usage(self.lane.capacity, int(p.c[S.NUM_USED]), held * bs, cached * bs,
                     int(p.c[S.EVICTIONS]))

    @property
    def prefix_hit_tokens(self) -> int:
        return self.lane.prefix_hit_tokens

    def seq_allocated_tokens(self, seq_ids) -> np.ndarray:
        return self.lane.pool.row_num_blocks[self._rows(seq_ids)] * self.block_size

    def seq_len(self, seq_id: int) -> int:
        return int(self.lane.pool.row_len[self._rows([seq_id])[0]])

    def block_table(self, seq_id: int) -> np.ndarray:
        row = self._rows([seq_id])[0]
        p = self.lane.pool
        return p.block_table[row, :p.row_num_blocks[row]].copy()

    def block_tables(self, seq_ids) -> np.ndarray:
        """int32 [B, max blocks held]; entries past a sequence's blocks are 0 (unused)."""
        p, rows = self.lane.pool, self._rows(seq_ids)
        nb = p.row_num_blocks[rows]
        width = int(nb.max()) if rows.size else 0
        out = p.block_table[rows, :width].copy()
        out[np.arange(width)[None, :] >= nb[:, None]] = 0
        return out

    def ranges(self, seq_ids) -> np.ndarray:
        """int64 [B, 2]: (first slot, reserved slots) of each sequence's range."""
        p, rows, g = self.lane.pool, self._rows(seq_ids), self.block_size
        return np.stack([p.row_start[rows] * g, p.row_num_blocks[rows] * g], axis=1)

    def snapshot(self) -> BlockMap:
        """Every block's (cell's) state, copied, with the running requests' final lengths."""
        lane = self.lane
        ids = lane.run_ids
        p, bs = lane.pool, self.block_size
        rows = lane.req.row[ids]
        if not self.contiguous:
            owned = p.block_owner >= 0
            filled = np.where(owned, bs, p.content).astype(np.int32)
            for row in rows.tolist():
                nb, length = int(p.row_num_blocks[row]), int(p.row_len[row])
                fill = np.clip(length - np.arange(nb) * bs, 0, bs)
                part = fill < bs
                filled[p.block_table[row, :nb][part]] = fill[part]
            bm = BlockMap(owner=np.where(owned, p.block_owner, FREE).astype(np.int32),
                          filled=filled, allocated=np.where(owned, bs, 0).astype(np.int32),
                          refcount=p.ref_cnt.astype(np.int16), cached=p.in_lru.copy(),
                          block_size=bs, bytes_per_token=self.bytes_per_token,
                          label=self.label, contiguous=False)
        else:
            n = self.num_blocks
            owner = np.full(n, FREE, np.int32)
            filled = np.zeros(n, np.int32)
            for r, row in zip(ids.tolist(), rows.tolist()):
                s, k = int(p.row_start[row]), int(p.row_num_blocks[row])
                owner[s:s + k] = r
                filled[s:s + k] = np.clip(p.row_len[row] - np.arange(k) * bs, 0, bs)
            bm = BlockMap(owner=owner, filled=filled,
                          allocated=np.where(owner != FREE, bs, 0).astype(np.int32),
                          refcount=(owner != FREE).astype(np.int16),
                          cached=np.zeros(n, np.bool_), block_size=bs,
                          bytes_per_token=self.bytes_per_token, label=self.label,
                          contiguous=True, buddy=lane.spec.placement == "buddy")
        return replace(bm, final_seq=ids.astype(np.int32),
                       final_len=lane.final_len[ids].astype(np.int32),
                       final_held=(p.row_num_blocks[rows] * bs).astype(np.int64))


def _key(h, end) -> tuple[int, int]:
    """A block's key as the publisher names it: (its hash as a signed 64-bit int, end)."""
    return int(np.asarray(h, np.uint64).view(np.int64)), int(end)


class PoolLog:
    """The compiled pool's KV cache events with the Python pool's reader verbs
    (kvviz/alloc/blockpool.py: start_log, drain_log, cached_keys), for the publisher."""

    def __init__(self, lane: Lane) -> None:
        self.lane = lane

    def cached_keys(self) -> dict:
        """The keys cached now (live or free), each with its parent key (None: a first
        block)."""
        p, bs = self.lane.pool, self.lane.cfg.block_size
        out: dict = {}
        for b in np.flatnonzero(p.block_hash).tolist():
            end = int(p.block_end[b])
            parent = p.block_parent[b]
            out.setdefault(_key(p.block_hash[b], end),
                           None if parent == 0 else _key(parent, end - bs))
        return out

    def start_log(self) -> dict:
        """Log from now on; returns the keys cached now."""
        self.lane.pool.c[S.NUM_KV_LOG] = 0
        self.lane.pool.c[S.KV_LOG_ON] = 1
        return self.cached_keys()

    def drain_log(self) -> list[tuple]:
        """("stored", key, parent key) / ("removed", key, None) since the last drain."""
        p, bs = self.lane.pool, self.lane.cfg.block_size
        n = int(p.c[S.NUM_KV_LOG])
        out = []
        for kind, h, end, parent in zip(p.kv_kind[:n].tolist(), p.kv_hash[:n],
                                        p.kv_end[:n].tolist(), p.kv_parent[:n]):
            if kind == 1:
                out.append(("stored", _key(h, end),
                            None if parent == 0 else _key(parent, end - bs)))
            else:
                out.append(("removed", _key(h, end), None))
        p.c[S.NUM_KV_LOG] = 0
        return out
