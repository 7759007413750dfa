"""A paged allocator's window replay: many steps' takes, fills and frees in one call.

kvviz/engine/window.py hands over, in execution order, what a window of engine steps does to
a paged lane: one block for a decode that opens a block, a decode that fills a block (its key
cached), an admission (its blocks, its prompt's full blocks cached), a finished sequence's
release. `replay_window` works out which block each take gets in closed form
(kvviz/alloc/freequeue.py, vLLM's order from kvviz/alloc/blockpool.py: takes from the front,
evicting the least recently used cached block when no plain one is left; a release puts its
blocks tail first, cached ones to the LRU tail, the rest to the front): the takes between two
releases are one run of pops, a release's plain blocks one run of pushes (`replay_runs`). The
rows go the same way. It writes the final tables, owners (FREE for the blocks free at the
end), counters and keys once: block for block what the verbs one by one would leave
(tests/alloc/test_window_replay.py). The keys' side is kvviz/alloc/window_keys.py. A mixin
over PagedAllocator's state (kvviz/alloc/paged.py).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from kvviz.alloc.freequeue import blocks_of, replay, replay_runs, resolve
from kvviz.alloc.window_keys import WindowKeys
from kvviz.core.blockmap import FREE
from kvviz.core.order import stable_order

TAKE, FILL, ADMIT, FREE_SEQ = 0, 1, 2, 3  # op kinds, in a step's order
EMPTY = np.zeros(0, np.int64)
ZERO = np.zeros(1, np.int64)


class PagedWindowVerbs(WindowKeys):
    @property
    def replayable(self) -> bool:
        """Whether replay_window serves: no block shared, no KV-event log to keep."""
        return not self._sharing and self._pool.log is None

    def replay_window(self, kind: np.ndarray, seq: np.ndarray, arg: np.ndarray,
                      live: np.ndarray, live_len: np.ndarray,
                      keys: Callable[[int], list] | None = None,
                      ) -> tuple[list[int], list[int]]:
        """Apply the ops: TAKE (one block for seq), FILL (seq's block `arg` is full: cache it
        under its key), ADMIT (a new seq of `arg` tokens: its blocks, its full blocks
        cached), FREE_SEQ (release seq, `arg` tokens written); then set the live sequences
        `live` to lengths `live_len`. keys(seq): the keys of its blocks, as many as it will
        fill (None: no prefix caching). Returns the free blocks after each ADMIT, and per
        evicted block the index of the op that evicted it. The caller checked that free
        blocks suffice and that no admission hits the cache."""
        if not self.replayable:
            raise ValueError("replay_window: blocks are shared or the cache log is on")
        pool, bs, rows = self._pool, self.block_size, self._rows
        kind, seq, arg = (np.asarray(x, np.int64) for x in (kind, seq, arg))
        # the takes, in order: one per TAKE, an admission's blocks in a row
        adm = np.flatnonzero(kind == ADMIT)
        ntake = (kind == TAKE).astype(np.int32)  # (int32: references and ids fit)
        ntake[adm] = -(-arg[adm] // bs)
        cum = np.cumsum(ntake, dtype=np.int32)  # per op: the takes up to it, its own included
        T = int(cum[-1]) if cum.size else 0
        # a sequence's lives (a walk preempts and re-admits), numbered 0..U-1: a life new
        # here starts with its ADMIT; life 0 of a sequence held before the window has none
        first_op, inv, by_life, start = lives(kind, seq)  # a life is a (sequence, count)
        useq = seq[first_op]  # each life's sequence
        new = kind[first_op] == ADMIT
        U = int(useq.size)
        row0 = np.where(new, 0, rows.row_of_seq[np.where(new, 0, useq)])
        pre = np.where(new, 0, self._nb[row0])  # blocks held before the window
        # takes grouped by life, in order: the ops in life order, each op's takes in a row;
        # life u's are by_seq[first[u]:][:ntk[u]]
        n_by = ntake[by_life]
        cb = np.cumsum(n_by, dtype=np.int32)
        by_seq = np.repeat(cum[by_life] - cb, n_by) + np.arange(T, dtype=np.int32)
        first = np.concatenate([ZERO, cb])[start]
        ntk = np.diff(np.append(first, T))
        fop = np.flatnonzero(kind == FREE_SEQ)
        fu = inv[fop]
        flen = pre[fu] + ntk[fu]
        # takes before each release (and after the last): the pop runs between the pushes
        pops = np.diff(np.concatenate([ZERO, cum[fop], [T]]))
        stack0, fifo0 = pool.replay_start()
        F = fop.size
        # every released block's reference, releases in order, each table in order
        e_ref = self._released(fu, pre, row0, by_seq, first, ntk)
        keyed = None if keys is None else self._keyed_frees(  # cached ones go to the FIFO
            np.flatnonzero(kind == FILL), adm, arg, inv, fop, flen, e_ref, pre, row0, by_seq,
            first)
        pc = flen if keyed is None else keyed.pc  # per release: the blocks it pushes
        # the stack's bottom below the lowest depth a take reaches stays as it is: the
        # replay starts from the s0 blocks above it
        kept = max(0, stack0.size + int((np.append(ZERO, np.cumsum(pc)) - np.cumsum(pops)
                                         ).min()))
        s0 = stack0.size - kept
        top0 = ~stack0[kept:].astype(np.int32)
        # entries are ids into refs = [those s0 blocks | pushes | FIFO at the start, then
        # appended]; per release its pop run, then one push run
        if keyed is None:
            refs = np.concatenate([top0, e_ref, ~fifo0.astype(np.int32)])
        else:
            refs = np.concatenate([top0, e_ref[keyed.pi], ~fifo0, e_ref[keyed.ki]])
        fifo_at = refs.size - fifo0.size - (0 if keyed is None else keyed.ki.size)
        runs = (pops, np.append(s0 + np.cumsum(pc) - pc, 0), np.append(pc, 0))
        rr = replay_runs(s0, *runs, fifo_at, refs.size - fifo_at)
        got = resolve(refs[rr.got])  # block id of every take
        ev = EMPTY if rr.fifo_take is None else np.flatnonzero(rr.fifo_take)
        ev_op = np.searchsorted(cum, ev, side="right")  # the op of each eviction
        fifo_used = refs[fifo_at:fifo_at + ev.size]
        stack = blocks_of(refs[rr.stack], got)  # above the kept bottom
        cached = fills = EMPTY
        if keyed is not None:
            kr = keyed.ki[max(0, ev.size - fifo0.size):]  # cached frees left in the FIFO
            cached = blocks_of(e_ref[kr], got)
            fills = np.clip(arg[fop[keyed.e_f[kr]]] - keyed.e_pos[kr] * bs, 0, bs)
            self._replay_keys(keys, useq, new, keyed.reg, got, fifo_used, ev, ev_op)
        pool.replay_end(stack, blocks_of(fifo_used, got), cached, fills, kept)
        self._replay_rows(kind, seq, inv, new, row0)
        for b in (stack, cached):  # free at the end (the kept ones are; the rest are owned)
            self._owner[b] = FREE
            self._ref[b] = 0
        gone = np.zeros(U, np.bool_)
        gone[fu] = True
        if F:
            r = row0[fu][~new[fu]]
            self._nb[r] = 0
            self._len[r] = 0
        su = np.flatnonzero(~gone & (ntk > 0))  # lives at the end that took blocks
        if su.size:
            c = ntk[su]
            at = np.repeat(first[su] - (np.cumsum(c) - c), c) + np.arange(int(c.sum()))
            tk = got[by_seq[at]]
            srow = rows.row_of_seq[useq[su]]
            pos = np.repeat(pre[su] - first[su], c) + at
            self._ensure_width(int(pos.max()) + 1)
            self._table[np.repeat(srow, c), pos] = tk
            self._nb[srow] = pre[su] + c
            self._own(tk, np.repeat(useq[su], c))
        if live.size:
            lr = rows.rows(live)
            self._len[lr] = live_len
            if keys is not None:
                self._ncached[lr] = live_len // bs
        held = rows.seq_of_row >= 0
        self._used = int(self._len[: held.size][held].sum())
        self._held = self.num_blocks - pool.free_count
        # free blocks after each admission: those at the start, less the takes up to it,
        # plus the releases before it
        cf = np.concatenate([ZERO, np.cumsum(flen)])
        after = pool.free_count + T - int(cf[-1]) - cum[adm] + cf[np.searchsorted(fop, adm)]
        return after.tolist(), ev_op.tolist()

    def _released(self, fu, pre, row0, by_seq, first, ntk) -> np.ndarray:
        """The references of the blocks released by lives fu (in order), each one's table in
        order: its blocks held from before the window (~id), then its takes."""
        po, nt = pre[fu], ntk[fu]
        oc = np.cumsum(po) - po
        n_old = int(oc[-1] + po[-1]) if fu.size else 0
        old = self._table[np.repeat(row0[fu], po), np.arange(n_old) - np.repeat(oc, po)]
        src = np.concatenate([~old, by_seq])
        lo = np.stack([oc, n_old + first[fu]], 1).ravel()  # per release: two ranges of src
        n = np.stack([po, nt], 1).ravel()
        return src[np.repeat(lo - (np.cumsum(n) - n), n) + np.arange(int(n.sum()))]

    def _replay_rows(self, kind: np.ndarray, seq: np.ndarray, life: np.ndarray,
                     new: np.ndarray, row0: np.ndarray) -> None:
        """Admissions claim rows and frees give them back, as `_new_row` and
        `RowTable.remove` in op order would: the free rows are a stack (the next claimed on
        top), replayed in closed form unless they run out on the way (then they grow: one
        by one). life: per op, its sequence's life; new/row0: per life, whether it is new
        here, else its row."""
        rows, U = self._rows, new.size
        sel = np.flatnonzero((kind == ADMIT) | (kind == FREE_SEQ))
        lv = life[sel]
        new, row0 = new[lv], row0[lv]
        claim = kind[sel] == ADMIT
        d = np.where(claim, -1, 1)
        free0 = rows._free_rows
        if sel.size and len(free0) + int(np.cumsum(d).min()) < 0:
            for k, r in zip(kind[sel].tolist(), seq[sel].tolist()):
                if k == ADMIT:
                    self._new_row(r)
                else:
                    rows.remove(r)
            return
        ids = seq[sel]
        size = rows.row_of_seq.shape[0]
        cid = ids[claim]
        if cid.size and int(cid.max()) >= size:  # RowTable.add's growth, id by id: only an
            rec = cid[cid >= np.maximum.accumulate(cid)]  # id above all before it can grow it
            for sid in rec.tolist():
                if sid >= size:
                    size = max(sid + 1, 2 * size)
        if size > rows.row_of_seq.shape[0]:
            rows.row_of_seq = np.concatenate(
                [rows.row_of_seq, np.full(size - rows.row_of_seq.shape[0], -1, np.int64)])
        # a freed sequence's row: from before the window, or the claim that gave it one
        fr, lc = ~claim, lv[claim]
        ref = np.zeros(sel.size, np.int64)
        fnew = new[fr]
        ref[fr] = ~row0[fr]
        if fnew.any():  # a life claimed here (once: its ADMIT) is freed by reference to it
            claim_of = np.zeros(U, np.int64)
            claim_of[lc] = np.arange(lc.size)
            ref[np.flatnonzero(fr)[fnew]] = claim_of[lv[fr][fnew]]
        rp = replay(~np.asarray(free0, np.int64), EMPTY, d, ref)
        got = resolve(rp.src)  # per claim, its row
        rows._free_rows = blocks_of(rp.stack, got).tolist()
        freed_rows = blocks_of(ref[fr], got)
        rows.seq_of_row[freed_rows] = -1
        rows.row_of_seq[ids[fr]] = -1
        freed = np.zeros(U, np.bool_)
        freed[lv[fr]] = True
        stay = ~freed[lc]
        rows.seq_of_row[got[stay]] = ids[claim][stay]
        rows.row_of_seq[ids[claim][stay]] = got[stay]
        rows.live += int(stay.sum()) - int((~fnew).sum())
        self._len[got] = 0
        self._nb[got] = 0
        self._ncached[got] = 0


class Lives(NamedTuple):
    first_op: np.ndarray  # per life: its first op
    inv: np.ndarray  # per op: its life
    by_life: np.ndarray  # the ops in life order (each life's in op order)
    start: np.ndarray  # per life: where its ops start in by_life


def lives(kind: np.ndarray, seq: np.ndarray) -> Lives:
    """The lives of the ops' sequences (a sequence's ops up to its next ADMIT; an ADMIT
    starts one, a sequence held before the window has one before its first ADMIT), ordered
    by (sequence, count): each one's first op and per op its life's index (np.unique's
    return_index and return_inverse over (sequence, count)), the ops in life order and
    where each life starts in it. One stable sort by sequence: a life's ops are consecutive
    in it, in op order."""
    order = stable_order(seq)
    s = seq[order]
    begins = (kind == ADMIT)[order]  # a new sequence, or an ADMIT: a new life
    if s.size:
        begins[0] = True
        begins[1:] |= s[1:] != s[:-1]
    life = np.cumsum(begins, dtype=np.int32)
    life -= 1
    inv = np.empty(seq.size, np.int32)
    inv[order] = life
    start = np.flatnonzero(begins)
    return Lives(order[start], inv, order, start)
