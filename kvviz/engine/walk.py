"""Pressure windows: a paged lane's steps while memory is short, many at once.

A paged lane without prefix caching whose running requests all decode spends its pressure
steps (preemptions, refusals, admissions, finishes on most steps) in a pattern the state
predicts: every running request decodes one token per step, so request r opens a block
exactly at the steps t with t % block_size == (t0 - L0) % block_size (L0 slots written
before step t0), and it finishes at a step known in advance (`Scheduler.finish_steps`).
`pressure_window` walks the steps with that bookkeeping alone, O(what changes) per step:
the decodes that open a block take one each, in running order; one that finds no free
block preempts by the rule's own `make_room` (the running tail, until it fits or is the
one preempted); a step that preempted nobody asks the heads of the queue in order, by the
rule's `Scheduler.admits_whole` (admit_run's closed form for one head) while they are
admitted whole and its `Scheduler.verdict` for the one that stops them (memory:
`PagedSpace.memory` on the free blocks the walk counts), but a head refused for CAPACITY
is not asked again while the free blocks stay below its need (see run_to); update
finishes the requests whose output is complete. The running requests' bookkeeping is
walkbook.py's. Then the blocks are handed out and back in that order by
`PagedAllocator.replay_window` (vLLM's free queue), and the scheduler's arrays, the lane's
counters, the events and the shares are written once.

The walk stops before a step it cannot take whole: a head too big for the cache (a
rejection), a head admitted with a chunk of its prompt (it would not decode), more running
requests than the token budget, nothing running and nothing waiting (the idle jump's
business). tests/engine/test_walk_equivalence.py and test_span_equivalence.py compare it
with stepping.
"""
from __future__ import annotations

import gc
from bisect import bisect_right
from typing import TYPE_CHECKING

import numpy as np

from kvviz.alloc.base import Reason
from kvviz.engine.closedform import arrival_steps
from kvviz.engine.eventlog import KIND_CODE, REASON_CODE
from kvviz.engine.walkbook import Book

if TYPE_CHECKING:
    from kvviz.engine.lane import Lane

LIMIT = 1 << 16  # steps one window walks at most
MAX_OPS = 1 << 18  # allocator ops it keeps at most (memory: a few lists of ints)
MIN_STEPS = 2  # shorter walks: a plain step costs less
FAILED = KIND_CODE["admit_failed"]
POLICY, CAPACITY = Reason.POLICY, Reason.CAPACITY
VALUE = {x: x.value for x in Reason}  # (an enum's .value is a slow read)


def pressure_window(lane: Lane, arrival_s: np.ndarray, step_ms: float,
                    stop: int | None) -> int:
    """Walk the steps after the lane's last one while they can be taken whole; returns how
    many were applied (0: step on)."""
    sched, a, cfg = lane.sched, lane.alloc, lane.cfg
    if lane.kv is not None or a.contiguous or sched.caching or not a.replayable:
        return 0
    ids = sched.running_ids()
    n0 = int(ids.size)
    if n0 > cfg.max_batched_tokens:
        return 0
    lens = sched.computed[ids]
    if n0 and (sched.num_tokens[ids] - lens != 1).any():
        return 0
    if not n0 and not sched.waiting_count:
        return 0
    S = lane.step_no
    end = S + LIMIT if stop is None else min(stop, S + LIMIT)
    collect = gc.isenabled()
    gc.disable()  # the walk makes many small tuples and no cycle: no collection pauses
    try:
        walk = _Walk(lane, ids, lens, step_ms)
        last = walk.run_to(end, arrival_s)
        if last - S < MIN_STEPS:
            return 0
        walk.commit(last)
    finally:
        if collect:
            gc.enable()
    return last - S


class _Walk(Book):
    """The walk: the bookkeeping (walkbook.Book), the waiting queue, what happened (events,
    admissions' free slots, failures, samples) and the shares' sums."""

    def __init__(self, lane: Lane, ids: np.ndarray, lens: np.ndarray, step_ms: float) -> None:
        super().__init__(lane, ids, lens)
        sched = lane.sched
        self.step_ms = step_ms
        self.max_tokens = sched.cfg.max_batched_tokens
        self.next_new = sched.next_new
        self.calm = [0] * 3  # per kind of step: steps, used slots, free blocks
        self.pressure = [0] * 3
        self.hsteps: list[int] = []  # the pressure steps
        self.last_fail = lane.last_fail
        self.short: int | None = None  # the head last refused for CAPACITY (see run_to)
        self.short_need = 0  # its blocks
        self.failures: dict[str, int] = {}
        self.sampled = 0
        self.arrivals: list[int] = []  # arrival steps of the requests from `lo` on
        self.lo = sched.arrived

    def run_to(self, end: int, arrival_s: np.ndarray) -> int:
        """Walk the steps up to `end`, stopping before the first that cannot be taken
        whole; returns the last step walked."""
        lo = self.lo
        total = arrival_s.size
        hi = min(total, lo + 4096)
        steps = arrival_steps(arrival_s[lo:min(hi + 1, total)], self.S, self.step_ms)
        if steps is None:
            return self.S
        if hi < total:  # the first arrival not planned: stop before it
            end = min(end, int(steps[-1]) - 1)
            steps = steps[:hi - lo]
        self.arrivals = steps = steps.tolist()
        ai, na = 0, len(steps)
        run, front, most = self.run, self.front, self.max_tokens
        seqs, bucket, bs = self.seqs, self.bucket, self.bs
        fin, hsteps = self.fin, self.hsteps
        # Shares.add's sums per kind of step (calm c, pressure h): steps, used slots, free
        # blocks (see commit; the internal slack: internal_sums)
        c0 = c1 = c3 = h0 = h1 = h3 = sampled = 0
        t = self.S
        try:
            while t < end:  # one step per turn (Lane.step's order), plain decodes inline
                t += 1
                while ai < na and steps[ai] <= t:
                    ai += 1
                waiting = len(front) + lo + ai - self.next_new
                n = len(run)
                if (not n and not waiting) or len(seqs) > MAX_OPS:  # (n <= most: _ask)
                    return t - 1  # (every request finished: nothing runs or waits)
                openers = bucket[t % bs]
                free = self.free - len(openers)
                if free < 0:  # an opener finds no free block: preemptions, nobody asked
                    pressure = self._decode_short(openers, t)
                elif waiting and n < most and not (  # budget left: the heads are asked
                        free < self.short_need and self.short == (front[0] if front else
                                                                  self.next_new)):
                    pressure = self._ask(t, openers, free, most - n, waiting)
                    if pressure is None:
                        return t - 1
                else:
                    # Nobody asked, or the head refused for CAPACITY the last time it was
                    # asked (nobody asked or admitted since: last_fail is still (head,
                    # CAPACITY)) with fewer free blocks than its need still: verdict's
                    # answer is PagedSpace.memory's CAPACITY refusal whatever the limits
                    # and the watermark; Lane._fail logs nothing for the same (request,
                    # reason).
                    seqs.extend(openers)  # the decodes: each opener takes a block
                    self.used += n
                    self.free = free
                    pressure = waiting and n < most
                sampled += len(run)
                if t in fin:
                    self._update(t)
                if pressure:
                    hsteps.append(t)
                    h0 += 1
                    h1 += self.used
                    h3 += self.free
                else:
                    c0 += 1
                    c1 += self.used
                    c3 += self.free
        finally:
            for acc, add in ((self.calm, (c0, c1, c3)), (self.pressure, (h0, h1, h3))):
                for i, x in enumerate(add):
                    acc[i] += x
            self.sampled += sampled
        return t

    def _ask(self, t: int, openers: dict[int, None], free: int, budget: int,
             waiting: int) -> bool | None:
        """A step that preempts nobody: the decodes, then the heads asked in order by the
        rule (`admits_whole` while they are admitted whole, then `verdict`; memory:
        `PagedSpace.memory` on the walk's free blocks). Returns
        whether the step is one of memory pressure; None when it cannot be taken whole
        (nothing changed). Each admission spends at least one of the `budget` tokens
        (max_batched_tokens - running), so the running requests never outnumber the token
        budget (run_to relies on it; pressure_window checks the start)."""
        sched, bs, front, wait_known = self.sched, self.bs, self.front, self.wait_known
        verdict, memory, too_big, known = (sched.verdict, sched.space.memory, sched.too_big,
                                           sched.num_tokens)
        whole = sched.admits_whole  # verdict's answer in closed form while it admits whole
        admitted: list[int] = []
        totals: list[int] = []  # their known tokens
        frees: list[int] = []  # free blocks after each
        nrun, fi, nn, nf = len(self.run), 0, self.next_new, len(front)
        adm = None
        while True:
            if fi < nf:
                r = front[fi]
                total = wait_known.get(r)
                if total is None:  # preempted before the walk
                    total = known.item(r)
            else:
                r = nn
                total = known.item(r)
            if too_big.item(r):
                return None  # a rejection: stepping logs it
            need = -(-total // bs)  # blocks_to_allocate of a request not live, no hits
            if not whole(total, nrun, budget, need, free):
                adm, n = verdict(total, 0, nrun, budget,
                                 lambda e, need=need, free=free: memory(need, free, e))
                if adm is not None:
                    break
                if n < total:  # a chunk: it would not decode next step
                    return None
            free -= need
            budget -= total
            admitted.append(r)
            totals.append(total)
            frees.append(free)
            nrun += 1
            waiting -= 1
            if fi < nf:
                fi += 1
            else:
                nn += 1
            if budget <= 0 or not waiting:
                break
        seqs = self.seqs
        seqs.extend(openers)  # the decodes: each opener takes a block
        self.used += len(self.run)
        for _ in range(fi):
            front.popleft()
        self.next_new = nn
        self.free = free
        if admitted:
            self.last_fail = None
            self.adm.append(len(seqs))
            self.adm_n.append(len(admitted))
            self.adm_t.append(t)
            self.adm_total += totals
            self.adm_free += frees
            seqs.extend(admitted)
            self._join(admitted, totals, t)
        self.short = None
        if adm is None:  # the budget or the queue ran out
            return False
        reason = adm.reason
        key = (r, VALUE[reason])
        if key != self.last_fail:  # Lane._fail: one event per (request, reason)
            self.last_fail = key
            self.failures[key[1]] = self.failures.get(key[1], 0) + 1
            self.refusals.append((len(seqs), (t, FAILED, r, REASON_CODE[key[1]],
                                              adm.need_tokens, adm.free_tokens,
                                              adm.largest_hole_tokens)))
        if reason is CAPACITY:
            self.short, self.short_need = r, need
            return True
        return reason is not POLICY

    def commit(self, end: int) -> None:
        """Write what the walk did up to step `end` (its last)."""
        lane, sched, a = self.lane, self.sched, self.lane.alloc
        run = list(self.run)
        live_len = [rec[0] + end + 1 for rec in self.run.values()]
        kind, seq, arg = self.ops()
        after, _ = a.replay_window(kind, seq, arg, np.asarray(run, np.int64),
                                   np.asarray(live_len, np.int64))
        if isinstance(after, np.ndarray):
            after = after.tolist()
        if a.free_blocks != self.free or after != self.adm_free:
            raise RuntimeError("pressure window (kvviz/engine/walk.py): the replay's free "
                               "blocks differ from the walk's")
        comp, known, gen = sched.computed, sched.num_tokens, sched.generated
        out = sched.w.output
        if run:
            r = np.asarray(run, np.int64)
            c = np.asarray(live_len, np.int64)
            comp[r] = c
            known[r] = c + 1
            gen[r] = np.asarray([rec[1] + end + 1 for rec in self.run.values()], np.int64)
        if self.wait_known:  # preempted in the walk, waiting
            r = np.asarray(list(self.wait_known), np.int64)
            comp[r] = 0
            known[r] = np.asarray(list(self.wait_known.values()), np.int64)
            gen[r] = np.asarray([self.wait_gen[x] for x in self.wait_known], np.int64)
        done = self.finished()
        if done.size:
            c = lane.kv_final[done]
            comp[done], known[done], gen[done] = c, c + 1, out[done]
        sched.running = run
        sched._ids = None
        sched.front = self.front
        sched.next_new = self.next_new
        sched.arrived = self.lo + bisect_right(self.arrivals, end)
        lane.done += int(done.size)
        lane.preemptions += self.preemptions
        lane.tokens_generated += self.sampled
        for k, v in self.failures.items():
            lane.failures[k] += v
        lane._last_fail = self.last_fail
        lane.step_no = end
        lane.time_s = end * self.step_ms / 1000.0
        lane.events.extend(self.event_columns(lane._code, lane.events.lanes, self.step_ms))
        cap, bs = lane.capacity, self.bs
        sums = self.internal_sums(end, self.hsteps)
        for pressure, (steps, used, free), internal in ((False, self.calm, sums[0]),
                                                        (True, self.pressure, sums[1])):
            allocated = steps * cap - free * bs  # the tails are the slack: no block shared
            lane.shares.add_sums(pressure, steps, used, allocated - used - internal, internal,
                                 free * bs, allocated - used)
