"""A window replay without prefix caching, in array form: the free stack's slots.

With no cached block, the free queue is a stack of plain blocks (kvviz/alloc/blockpool.py):
a take pops its top, an admission pops its blocks top first, a release pushes its table in
order. Spelled out block by block, each pop or push moves the stack's height by one, so a
push fills the slot at the height it reaches and a pop empties the slot it leaves; in each
slot fills and empties alternate. A pop therefore takes the block the last push into its
slot left there (or the block the stack held there before the window), and a push names a
block of its request's table: one held before the window, or one of its own pops. One sort
by slot and a few rounds of following these references give every block, with no Python
loop over blocks; only rows (one per admission and release) are claimed and freed in
execution order. It leaves what `replay_window` (kvviz/alloc/paged_window.py) leaves, block
for block: tests/engine/test_span_equivalence.py and test_seat_windows.py compare both with
stepping. A mixin over PagedAllocator's state.
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
        stack0 = pool.plain_array()
        is_free = kind == FREE_SEQ
        pops = np.where(kind == TAKE, 1, np.where(kind == ADMIT, -(-arg // bs), 0))
        # per op's request: blocks held before the window, blocks popped in it
        ids, inv = np.unique(seq, return_inverse=True)
        live_before = rows.is_live(ids)
        old_nb = np.zeros(ids.size, np.int64)
        old_rows = rows.rows(ids[live_before])
        old_nb[live_before] = self._nb[old_rows]
        popped_by = np.bincount(inv, weights=pops, minlength=ids.size).astype(np.int64)
        pushes = np.where(is_free, (old_nb + popped_by)[inv], 0)
        # element events: each op's pops, then its pushes; the stack height after each
        n_ev = pops + pushes
        ev_op = np.repeat(np.arange(kind.size), n_ev)
        push = np.repeat(is_free, n_ev)
        height = stack0.size + np.cumsum(np.where(push, 1, -1))
        slot = np.where(push, height - 1, height)
        # a pop takes what the last push into its slot left (or the stack's old block there)
        E = ev_op.size
        by_slot = np.lexsort((np.arange(E), slot))
        prev = np.empty(E, np.int64)
        prev[by_slot] = np.concatenate([[-1], by_slot[:-1]])
        same = np.zeros(E, np.bool_)
        same[by_slot[1:]] = slot[by_slot[1:]] == slot[by_slot[:-1]]
        known = np.full(E, -1, np.int64)
        ref = np.full(E, -1, np.int64)
        pop = ~push
        ref[pop & same] = prev[pop & same]
        first = pop & ~same
        known[first] = stack0[slot[first]]
        # a push names a block of its request's table: an old one, or one of its pops
        pe = np.flatnonzero(pop)
        p_req = inv[ev_op[pe]]
        by_req = pe[np.argsort(p_req, kind="stable")]
        req_start = np.concatenate([[0], np.cumsum(popped_by)])[:-1]
        fe = np.flatnonzero(push)
        f_req = inv[ev_op[fe]]
        j = fe - np.repeat((np.cumsum(n_ev) - n_ev)[is_free], pushes[is_free])  # in its table
        o = old_nb[f_req]
        is_old = j < o
        rr = np.zeros(ids.size, np.int64)
        rr[live_before] = old_rows
        known[fe[is_old]] = self._table[rr[f_req[is_old]], j[is_old]]
        ref[fe[~is_old]] = by_req[req_start[f_req[~is_old]] + j[~is_old] - o[~is_old]]
        while True:  # follow the references to a known block
            open_ = known < 0
            if not open_.any():
                break
            r = ref[open_]
            got = known[r]
            idx = np.flatnonzero(open_)
            known[idx[got >= 0]] = got[got >= 0]
            ref[idx[got < 0]] = ref[r[got < 0]]
        # the stack after the window: per slot below the final height, its last push
        top = int(height[-1]) if E else stack0.size
        stack = np.empty(top, np.int64)
        stack[:min(top, stack0.size)] = stack0[:top]
        last = np.ones(E, np.bool_)
        last[by_slot[:-1]] = slot[by_slot[:-1]] != slot[by_slot[1:]]
        fill = last & push & (slot < top)
        stack[slot[fill]] = known[fill]
        pool.set_plain(stack)
        # rows in execution order; the tables of the requests live after the window
        for k, r in zip(kind[kind >= ADMIT].tolist(), seq[kind >= ADMIT].tolist()):
            if k == ADMIT:
                self._new_row(r)
            else:
                row = rows.remove(r)
                self._nb[row] = 0
                self._len[row] = 0
        if push.any():
            f = known[push]
            self._owner[f] = FREE
            self._ref[f] = 0
        stay = rows.is_live(ids) & (popped_by > 0)
        if stay.any():
            n_new = popped_by[stay]
            srows = rows.rows(ids[stay])
            self._ensure_width(int((old_nb[stay] + n_new).max()))
            within = np.arange(int(n_new.sum())) - np.repeat(np.cumsum(n_new) - n_new, n_new)
            grab = by_req[np.repeat(req_start[stay], n_new) + within]
            self._table[np.repeat(srows, n_new), np.repeat(old_nb[stay], n_new) + within] = (
                known[grab])
            self._nb[srows] = old_nb[stay] + n_new
            self._own(known[grab], np.repeat(ids[stay], n_new))
        if live.size:
            self._len[rows.rows(live)] = live_len
        held = rows.seq_of_row >= 0
        self._used = int(self._len[: held.size][held].sum())
        self._held = self.num_blocks - pool.free_count
        d = np.where(is_free, pushes, -pops)  # free blocks after each op
        after = stack0.size + np.cumsum(d)
        return after[kind == ADMIT].tolist(), []
