"""PagedAllocator's views of its state: block tables and the block map (kvviz/alloc/paged.py)."""
from __future__ import annotations

import numpy as np

from kvviz.core.blockmap import FREE, BlockMap


class PagedViewVerbs:
    def block_table(self, seq_id: int) -> np.ndarray:
        row = self._rows.row(seq_id)
        return self._table[row, : self._nb[row]].copy()

    def block_tables(self, seq_ids: np.ndarray) -> np.ndarray:
        """int32 [B, max blocks held]; entries past a sequence's blocks are 0 (unused)."""
        rows = self._rows.rows(seq_ids)
        width = int(self._nb[rows].max()) if rows.size else 0
        out = self._table[rows, :width].copy()
        out[np.arange(width)[None, :] >= self._nb[rows][:, None]] = 0
        return out

    def snapshot(self) -> BlockMap:
        """Every block's state, copied. Fill levels: a held block is full unless it is at or
        past the end of its sequence's writes; only those (about one per sequence) are
        looked up through the block tables, not all of them: the collector takes this at
        4 Hz on the engine thread (cost: docs/BENCHMARKS.md).
        """
        bs = self.block_size
        owned = self._owner != FREE
        filled = np.where(owned, np.int32(bs), self._pool.content)  # cached-free: content
        rows = np.flatnonzero(self._rows.seq_of_row >= 0)
        if rows.size:
            nb, length = self._nb[rows], self._len[rows]
            k = length // bs  # per row: blocks written to the end
            part = nb > k  # rows holding a block not written to the end: block k
            rows, nb, k = rows[part], nb[part], k[part]
            filled[self._table[rows, k]] = (length[part] - k * bs).astype(np.int32)
            past = nb - k > 1  # rows also holding blocks past block k: nothing written
            if past.any():
                rows, nb, k = rows[past], nb[past], k[past]
                j = np.arange(int(nb.max()))[None, :]
                mask = (j > k[:, None]) & (j < nb[:, None])
                filled[self._table[rows, : j.shape[1]][mask]] = 0
        return BlockMap(
            owner=self._owner.copy(),
            filled=filled,
            allocated=np.where(owned, np.int32(bs), np.int32(0)),
            refcount=self._ref.copy(),
            cached=self._pool.cached.copy(),
            block_size=self.block_size,
            bytes_per_token=self.bytes_per_token,
            label=self.label,
            contiguous=False,
        )
