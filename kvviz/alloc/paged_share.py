"""A paged allocator's shared blocks: prefix-cache hits held, forks, copy-on-write, refcounts.

A block is shared once a second sequence holds it: a prefix-cache hit on a live block, or a
fork. Its refcount counts its holders, `_holders` names them (shared blocks only), and its
owner is the lowest holder left. Writing into a shared block copies it first; a release drops
one reference per block and gives back only those nobody holds any more. The first share sets
`_sharing`, which sends every later verb down these careful paths. A mixin over
PagedAllocator's state (kvviz/alloc/paged.py).
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
            for b, owner in zip(live.tolist(), self._owner[live].tolist()):
                self._holders.setdefault(b, {owner}).add(seq_id)
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
        ref, shared = self._ref, self._holders
        ref[blocks] -= 1
        gone = ref[blocks] == 0
        zero = blocks[gone]
        keep = blocks[~gone] if shared else blocks[:0]  # an entry's ref was >= 2: not 0
        for b, own, one in zip(keep.tolist(), (self._owner[keep] == seq_id).tolist(),
                               (ref[keep] == 1).tolist()):
            holders = shared.get(b)
            if holders is not None:
                holders.discard(seq_id)
                if own:
                    self._owner[b] = min(holders)
                if one:
                    del shared[b]
        if zero.size:
            self._give_back(zero, fills[gone])

    def fork(self, parent_id: int, child_id: int) -> Admission:
        prow = self._rows.row(parent_id)
        blocks = self._table[prow, : self._nb[prow]].copy()
        row = self._new_row(child_id)
        self._attach(row, child_id, blocks)
        self._len[row] = self._len[prow]
        self._ref[blocks] += 1
        for b in blocks:
            self._holders.setdefault(int(b), {int(self._owner[b])}).add(child_id)
        self._sharing = self._forked = True
        return self._answer(True, 0)
