"""The free queue's takes and frees over many steps, in closed form (numpy, no loop per block).

kvviz/alloc/blockpool.py keeps vLLM's free queue as a stack (plain free blocks, the next taken
on top) and a FIFO (cached blocks, least recently freed first). A take pops the stack, or, when
the stack is empty, evicts the FIFO's head; a free pushes plain blocks on the stack and appends
cached ones to the FIFO. Given those events in order, which block each take gets follows
without walking them one by one:

  stack depth   s_i = max(0, s_(i-1) + d_i)  (d = +1 push, -1 take): a running minimum of the
                cumulative sum, so a take pops the stack iff the depth before it is > 0;
  stack pops    the events at one depth level, in time order, alternate push, pop, push...:
                sorted by (level, time), each pop gets the entry just before it;
  FIFO takes    the k-th take that finds the stack empty gets the FIFO's k-th entry (its
                blocks at the start, then those appended, in order).

Blocks are named by reference: ~b for block b held before the replay (stack, FIFO, tables),
j >= 0 for "the block take j got". `resolve` turns references into block ids by pointer
jumping (each take's reference points at an earlier take or a known block).

`replay_runs` takes the same events in runs (so many takes, then a push of a range of entry
ids: a released sequence's blocks) and names entries by id. With few runs against many events
(a window's releases push whole sequences) it walks the runs with the stack kept as ranges
of ids: a loop per run, not per block; a pop run takes whole ranges off the top and cuts at
most one short, so the walk touches at most one range per pop run plus one per range ever
on the stack. Else it expands the runs and sorts by level as above. A take's entry is its
range's top less its place in the segment it takes:

  stack (ranges, bottom first)  [0..s0-1] [a..a+4]      pop 7 takes a+4..a, then s0-1, s0-2
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from kvviz.core.order import stable_order


class Replay(NamedTuple):
    src: np.ndarray  # per take: the reference it got
    fifo_take: np.ndarray  # per take: whether it evicted the FIFO's head
    stack: np.ndarray  # references left on the stack, bottom first
    fifo_used: int  # FIFO entries taken (from its start)


def replay(stack0: np.ndarray, fifo: np.ndarray, d: np.ndarray, ref: np.ndarray) -> Replay:
    """stack0: references on the stack at the start (bottom first); fifo: every reference the
    FIFO holds or is appended, in FIFO order; d: per event in time order, -1 a take or +1 a
    push of ref[i]. The caller checked that no take finds both empty."""
    s0 = int(stack0.size)
    c = np.cumsum(d, dtype=np.int32 if d.size < 1 << 30 else np.int64) + s0
    take = d < 0
    if not c.size or c.min() >= 0:  # every take pops the stack (nothing from the FIFO)
        lo = int(c.min()) if c.size else s0
        m = min(lo, s0) + 1  # the lowest level popped: right above the lowest depth
        # an event's level: where a push lands (the depth after it), what a pop takes (the
        # depth before it)
        return _match(stack0, m, c + take, take, ref, None, take, c, s0)
    c -= np.minimum(np.minimum.accumulate(c), 0)  # a take finds the stack empty: floor at 0
    prev = np.concatenate([np.array([s0], np.int64), c[:-1]])
    pop = take & (prev > 0)
    ev = np.flatnonzero(~take | pop)
    m = min(int(prev[pop].min()), s0 + 1) if pop.any() else s0 + 1
    r = _match(stack0, m, prev[ev] + ~take[ev], pop[ev], ref[ev], ev, take, c, s0)
    fifo_ev = np.flatnonzero(take & (prev == 0))
    got = np.zeros(d.size, np.int64)
    got[take] = r.src
    got[fifo_ev] = fifo[:fifo_ev.size]
    return Replay(got[take], (prev == 0)[take], r.stack, int(fifo_ev.size))


def _match(stack0: np.ndarray, m: int, lv: np.ndarray, is_pop: np.ndarray, refs: np.ndarray,
           ev: np.ndarray | None, take: np.ndarray, depth: np.ndarray, s0: int) -> Replay:
    """Each pop takes the entry pushed last at its level before it: the events that touch
    the stack (time indices ev; None: all), at levels lv >= m, sorted by (level, time) with
    the initial entries at levels m..s0 first, alternate entry, pop, entry... per level.
    Returns the pops' references per take (0 for a take that did not pop) and the stack."""
    k = s0 - m + 1  # initial entries at levels m..s0
    level = np.concatenate([np.arange(m, s0 + 1), lv])
    refs = np.concatenate([stack0[m - 1:], refs])  # (a pop's entry is never read)
    order = stable_order(level, m)  # (level, time): time order is the array's order
    level = level[order]
    p = np.flatnonzero(np.concatenate([np.zeros(k, np.bool_), is_pop])[order])
    at = order[p] - k
    got = np.zeros(take.size, np.int64)
    got[at if ev is None else ev[at]] = refs[order[p - 1]]
    end = int(depth[-1]) if depth.size else s0
    last = np.flatnonzero(np.concatenate([level[1:] != level[:-1], [level.size > 0]]))
    last = last[level[last] <= end]
    stack = np.concatenate([stack0[:m - 1].astype(np.int64), refs[order[last]]])
    return Replay(got[take], np.zeros(int(take.sum()), np.bool_), stack, 0)


class Runs(NamedTuple):
    got: np.ndarray  # per take: the entry id it got
    fifo_take: np.ndarray | None  # per take: whether it evicted the FIFO's head (None: none did)
    stack: np.ndarray  # entry ids left on the stack, bottom first


RUN_EVENTS = 8  # events per run from which the walk over runs beats the sort by level


def replay_runs(s0: int, pop: np.ndarray, lo: np.ndarray, n: np.ndarray, fifo_at: int,
                nfifo: int, loop: bool | None = None) -> Runs:
    """Run i: pop[i] takes, then a push of entries lo[i] .. lo[i] + n[i] - 1 (in that order).
    Entries 0 .. s0 - 1 are on the stack at the start (bottom first); the FIFO holds entries
    fifo_at .. fifo_at + nfifo - 1 in order. Every entry is pushed at most once. loop: force
    the walk over runs (True) or the sort by level (False); None: by the events per run."""
    pop, lo, n = (np.asarray(x, np.int64) for x in (pop, lo, n))
    T = int(pop.sum())
    if pop.size > 1:  # a run without takes whose push follows the one before: one push
        keep = np.flatnonzero(np.concatenate([[True], (pop[1:] > 0) | (
            lo[1:] != lo[:-1] + n[:-1])]))
        if keep.size < pop.size:
            pop, lo, n = pop[keep], lo[keep], np.add.reduceat(n, keep)
    if loop is None:
        loop = (T + int(n.sum())) >= RUN_EVENTS * pop.size
    if not loop:
        d = np.repeat(np.tile(np.array([-1, 1], np.int64), pop.size),
                      np.stack([pop, n], 1).ravel())
        ref = np.zeros(d.size, np.int64)
        push = d > 0
        ref[push] = np.repeat(lo - (np.cumsum(n) - n), n) + np.arange(int(n.sum()))
        rp = replay(np.arange(s0, dtype=np.int64), np.arange(fifo_at, fifo_at + nfifo), d, ref)
        return Runs(rp.src, rp.fifo_take if rp.fifo_used else None, rp.stack)
    st_lo, st_n = ([0], [s0]) if s0 else ([], [])  # the stack: ranges of ids, bottom first
    top, cnt = [], []  # per pop segment: the id it takes first (then downwards), how many
    fifo_seg, k = [], 0  # FIFO segments: their index in top/cnt; FIFO entries taken
    for m, a, b in zip(pop.tolist(), lo.tolist(), n.tolist()):
        while m:
            if not st_n:  # the stack is empty: the rest evict the FIFO's head
                fifo_seg.append(len(cnt))
                top.append(fifo_at + k)
                cnt.append(m)
                k += m
                break
            h = st_n[-1]
            top.append(st_lo[-1] + h - 1)
            if h <= m:
                st_lo.pop()
                st_n.pop()
                cnt.append(h)
                m -= h
            else:
                st_n[-1] = h - m
                cnt.append(m)
                m = 0
        if b:
            if st_n and st_lo[-1] + st_n[-1] == a:
                st_n[-1] += b
            else:
                st_lo.append(a)
                st_n.append(b)
    c = np.asarray(cnt, np.int64)
    start = np.cumsum(c) - c  # each segment's first take
    got = np.repeat(np.asarray(top, np.int64) + start, c) - np.arange(T)
    fifo_take = None
    if fifo_seg:
        fifo_take = np.repeat(np.isin(np.arange(c.size), fifo_seg), c)
        got[fifo_take] = fifo_at + np.arange(k)
    sn = np.asarray(st_n, np.int64)
    stack = np.repeat(np.asarray(st_lo, np.int64) - (np.cumsum(sn) - sn), sn) + np.arange(
        int(sn.sum()))
    return Runs(got, fifo_take, stack)


def resolve(src: np.ndarray) -> np.ndarray:
    """Block ids of takes whose references are `src` (each ~b or an earlier take): pointer
    jumping, each round over the takes still unresolved (a chain of n links takes about
    log2(n) rounds; more than that means a reference to a later take, i.e. a cycle)."""
    src = np.asarray(src)
    f = np.array(src, np.int32 if src.dtype == np.int32 else np.int64)
    idx = np.flatnonzero(f >= 0)
    for _ in range(int(f.size).bit_length() + 1):
        if not idx.size:
            return ~f
        hop = f[f[idx]]
        f[idx] = hop
        idx = idx[hop >= 0]
    if idx.size:
        raise ValueError("resolve: the references form a cycle (a take refers to a later one)")
    return ~f


def blocks_of(refs: np.ndarray, takes: np.ndarray) -> np.ndarray:
    """Block ids of references, given the block ids of the takes."""
    refs = np.asarray(refs, np.int64)
    return np.where(refs >= 0, takes[np.maximum(refs, 0)] if takes.size else 0, ~refs)
