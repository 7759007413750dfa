"""A window replay without prefix caching: the takes as slices of the free stack.

With no cached block, the free queue is a stack of plain blocks (kvviz/alloc/blockpool.py):
a take pops its top, an admission pops its blocks top first, a release pushes its table in
order. So every run of takes and admissions between two releases pops one slice off the top,
and `replay_plain` assigns the blocks of a whole run at once (a request's blocks are the
slots of its pops in execution order), walking only the admissions (a row each) and the
releases (a push each) in Python. It leaves what `replay_window` (kvviz/alloc/
paged_window.py) leaves, block for block: tests/engine/test_span_equivalence.py and
test_seat_windows.py compare both with stepping. A mixin over PagedAllocator's state.
"""
from __future__ import annotations

import numpy as np

from kvviz.alloc.paged_window import ADMIT, FREE_SEQ, TAKE
from kvviz.core.blockmap import FREE


class PagedPlainReplay:
    def replay_plain(self, kind: np.ndarray, seq: np.ndarray, arg: np.ndarray,
                     live: np.ndarray, live_len: np.ndarray) -> tuple[list[int], list[int]]:
        """replay_window's ops (kind, seq, arg) for a lane that caches nothing, where the
        caller checked that the free blocks serve every take and admission. Returns the free
        blocks after each ADMIT, and no evictions."""
        if not self.replayable or self._pool.cached_count:
            raise ValueError("replay_plain: blocks are shared, cached or logged")
        pool, rows, bs = self._pool, self._rows, self.block_size
        pops = np.where(kind == TAKE, 1, np.where(kind == ADMIT, -(-arg // bs), 0))
        off = np.cumsum(pops) - pops  # each op's first slot in `popped`
        popped = np.empty(int(pops.sum()), np.int64)  # blocks in the order they are taken
        who = np.repeat(seq, pops)
        order = np.argsort(who, kind="stable")
        ids, start, count = np.unique(who[order], return_index=True, return_counts=True)
        slots = {r: (s, s + n) for r, s, n in zip(ids.tolist(), start.tolist(),
                                                  count.tolist())}
        plain = pool.plain_list()
        stack = np.empty(self.num_blocks, np.int64)
        top = len(plain)
        stack[:top] = plain
        filled = 0
        freed: list[np.ndarray] = []

        def blocks_of(r: int) -> np.ndarray:
            old = self._table[rows.row_of_seq[r], :self._nb[rows.row_of_seq[r]]]
            s = slots.get(r)
            return old if s is None else np.concatenate([old, popped[order[s[0]:s[1]]]])

        events = np.flatnonzero(kind >= ADMIT)
        for i, k, r in zip(events.tolist(), kind[events].tolist(), seq[events].tolist()):
            if k == ADMIT:
                self._new_row(r)
                continue
            upto = int(off[i])
            if upto > filled:  # the takes since the last release: a slice off the top
                n = upto - filled
                popped[filled:upto] = stack[top - n:top][::-1]
                top -= n
                filled = upto
            t = blocks_of(r)
            row = rows.remove(r)
            self._nb[row] = 0
            self._len[row] = 0
            stack[top:top + t.size] = t
            top += t.size
            freed.append(t)
        n = popped.size - filled
        if n:
            popped[filled:] = stack[top - n:top][::-1]
            top -= n
        pool.set_plain(stack[:top])
        if freed:
            f = np.concatenate(freed)
            self._owner[f] = FREE
            self._ref[f] = 0
        cand = np.fromiter(slots, np.int64, len(slots))
        touched = cand[rows.is_live(cand)].tolist()
        if touched:
            tables = [blocks_of(r) for r in touched]
            for r, t in zip(touched, tables):
                row = int(rows.row_of_seq[r])
                self._ensure_width(t.size)
                self._table[row, :t.size] = t
                self._nb[row] = t.size
            self._own(np.concatenate(tables), np.repeat(touched, [t.size for t in tables]))
        if live.size:
            self._len[rows.rows(live)] = live_len
        held = rows.seq_of_row >= 0
        self._used = int(self._len[: held.size][held].sum())
        self._held = self.num_blocks - pool.free_count
        d = np.where(kind == FREE_SEQ, 0, -pops)  # free blocks after each op, releases aside
        d[kind == FREE_SEQ] = -(-arg[kind == FREE_SEQ] // bs)
        after = len(plain) + np.cumsum(d)
        return after[kind == ADMIT].tolist(), []
