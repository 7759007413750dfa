"""A paged allocator's shared blocks: prefix-cache hits held, forks, copy-on-write, refcounts.

A block is shared once a second sequence holds it: a prefix-cache hit on a live block, or a
fork. Its refcount counts its holders and its owner is the lowest of them, worked out only
for snapshots (kvviz/alloc/paged_view.py: a block ever shared is marked in `_mixed`), so a hit
or a release costs O(1) per block. Writing into a shared block copies it first; a release drops
one reference per block and gives back only those nobody holds any more. The first share sets
`_sharing`, which sends every later verb down these careful paths (and keeps window replays
off: kvviz/alloc/paged_window.py). A mixin over PagedAllocator's state (kvviz/alloc/paged.py).
"""
from __future__ import annotations

import numpy as np

from kvviz.alloc.base import Admission


class PagedShareVerbs:
    def _hold_hits(self, seq_id: int, hits: list[int]) -> None:
        """`seq_id` holds its prefix-cache hits: a cached free block becomes its own (out of
        the free pool; its fill follows from the length), a live one gains a holder."""
        if hits:  # the cached free ones leave the free queue, the held ones gain a holder
            mine, live, fill = self._pool.reuse_many(np.asarray(hits, np.int64))
            self._used += fill
            self._own(mine, seq_id)
            self._ref[live] += 1  # (a request's hits are distinct blocks)
            self._mixed[live] = True  # owned by their lowest holder (paged_view.py)
            self._sharing = True

    def _copy_on_write(self, row: int, seq_id: int, idx: int) -> None:
        old = int(self._table[row, idx])
        new = int(self._take(1)[0])
        fill = self._fills(int(self._len[row]), idx, 1)
        self._used += int(fill[0])  # the copy is this sequence's own from now on
        self._own(new, seq_id)
        self._table[row, idx] = new
        self._drop_ref(np.asarray([old], np.int32), seq_id, fill)

    def _drop_ref(self, blocks: np.ndarray, seq_id: int, fills: np.ndarray) -> None:
        """seq_id lets go of `blocks`: one reference each; those nobody holds go back. (A
        block it owned that others still hold is marked in `_mixed`: it was shared.)"""
        ref = self._ref
        ref[blocks] -= 1
        gone = ref[blocks] == 0
        if gone.any():
            self._give_back(blocks[gone], fills[gone])

    def fork(self, parent_id: int, child_id: int) -> Admission:
        prow = self._rows.row(parent_id)
        blocks = self._table[prow, : self._nb[prow]].copy()
        row = self._new_row(child_id)
        self._attach(row, child_id, blocks)
        self._len[row] = self._len[prow]
        self._ref[blocks] += 1
        self._mixed[blocks] = True
        self._sharing = self._forked = True
        return self._answer(True, 0)
