"""Pressure windows: a paged lane's steps while memory is short, many at once.

A paged lane without prefix caching whose running requests all decode spends its pressure
steps (preemptions, refusals, admissions, finishes on most steps) in a pattern the state
predicts: every running request decodes one token per step, so request r opens a block
exactly at the steps t with t % block_size == (t0 - L0) % block_size (L0 slots written
before step t0), and it finishes at a step known in advance (`Scheduler.finish_steps`).
`pressure_window` walks the steps with that bookkeeping alone, O(what changes) per step:
the decodes that open a block take one each, in running order; one that finds no free
block preempts by the rule's own `make_room` (the running tail, until it fits or is the
one preempted); a step that preempted nobody asks the rule's `Scheduler.verdict` for each
head of the queue in order (memory: `PagedSpace.memory` on the free blocks the walk
counts); update finishes the requests whose output is complete. Then the blocks are handed
out and back in that order by `PagedAllocator.replay_window` (vLLM's free queue), and the
scheduler's arrays, the lane's counters, the events and the shares are written once.

The walk stops before a step it cannot take whole: a head too big for the cache (a
rejection), a head admitted with a chunk of its prompt (it would not decode), more running
requests than the token budget, nothing running and nothing waiting (the idle jump's
business). tests/engine/test_walk_equivalence.py and test_span_equivalence.py compare it
with stepping.
"""
from __future__ import annotations

from bisect import bisect_right
from collections import deque
from typing import TYPE_CHECKING

import numpy as np

from kvviz.alloc.base import Reason
from kvviz.alloc.paged_window import ADMIT, FREE_SEQ, TAKE
from kvviz.engine.closedform import arrival_steps
from kvviz.engine.eventlog import KIND_CODE, REASON_CODE
from kvviz.engine.scheduler import make_room

if TYPE_CHECKING:
    from kvviz.engine.lane import Lane

LIMIT = 1 << 16  # steps one window walks at most
MAX_OPS = 1 << 18  # allocator ops it keeps at most (memory: a few lists of ints)
MIN_STEPS = 2  # shorter walks: a plain step costs less
PREEMPTED, ADMITTED, FAILED, FINISHED = (KIND_CODE[k] for k in (
    "preempted", "admitted", "admit_failed", "finished"))
POLICY = Reason.POLICY


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
    walk = _Walk(lane, ids, lens, step_ms)
    S = lane.step_no
    end = S + LIMIT if stop is None else min(stop, S + LIMIT)
    last = walk.run_to(end, arrival_s)
    if last - S < MIN_STEPS:
        return 0
    walk.commit(last)
    return last - S


class _Running(dict):
    """The running requests in vLLM's order (a dict's insertion order): removal anywhere in
    O(1), and pop() takes the last one, as `make_room` pops a running list."""

    def pop(self) -> int:  # type: ignore[override]
        return self.popitem()[0]


class _Walk:
    """The walk's state. Per running request: the slots written before its first decode in
    the walk (L0), that step (t0) and its samples before it (g0), its finish step (fstep),
    and where its last block starts (thr) with the slots that block leaves unused (waste);
    the running requests in order (run), by opening residue (bucket) and by finish step
    (fin), each in running order;
    per request preempted in the walk, its known tokens and samples; the free blocks; what
    happened, in execution order (ops, events) and the shares' sums."""

    def __init__(self, lane: Lane, ids: np.ndarray, lens: np.ndarray, step_ms: float) -> None:
        sched, a = lane.sched, lane.alloc
        self.lane, self.sched, self.step_ms = lane, sched, step_ms
        self.bs = bs = a.block_size
        self.S = S = lane.step_no
        run = ids.tolist()
        self.run = _Running.fromkeys(run)
        L = lens.tolist()
        self.L0 = dict(zip(run, L))
        self.t0 = dict.fromkeys(run, S + 1)
        self.g0 = dict(zip(run, sched.generated[ids].tolist()))
        self.bucket: list[dict[int, None]] = [{} for _ in range(bs)]
        for r, x in zip(run, L):
            self.bucket[(S + 1 - x) % bs][r] = None
        self.fin: dict[int, dict[int, None]] = {}  # step -> the requests finishing then
        self.fstep = dict(zip(run, sched.finish_steps(S, ids, True).tolist()))
        for r, f in self.fstep.items():
            self.fin.setdefault(f, {})[r] = None
        kvf = lane.kv_final[ids]
        last = -(-kvf // bs)
        thr = (last - 1) * bs
        self.thr = dict(zip(run, thr.tolist()))
        self.waste = dict(zip(run, (last * bs - kvf).tolist()))
        inside = lens > thr
        self.internal = int((last * bs - kvf)[inside].sum())
        self.lastopen: dict[int, list[tuple[int, int]]] = {}  # step -> (request, t0)
        for r, s in zip(ids[~inside].tolist(), (S + 1 + thr - lens)[~inside].tolist()):
            self.lastopen.setdefault(s, []).append((r, S + 1))
        self.used = int(lens.sum())
        self.free = a.free_blocks
        self.front = deque(sched.front)
        self.next_new = sched.next_new
        self.wait_known: dict[int, int] = {}  # preempted in the walk, waiting
        self.wait_gen: dict[int, int] = {}
        self.finished: dict[int, int] = {}  # finished in the walk: slots written
        self.kinds: list[int] = []  # the allocator's ops (replay_window's), in order
        self.seqs: list[int] = []
        self.args: list[int] = []
        self.events: list[tuple] = []  # (step, kind, request, reason, need, free[, hole])
        self.free_after: list[int] = []
        self.calm = [0] * 4  # per kind of step: steps, used slots, internal, free blocks
        self.pressure = [0] * 4
        self.last_fail = lane.last_fail
        self.failures: dict[str, int] = {}
        self.preemptions = self.sampled = 0
        self.arrivals: list[int] = []  # arrival steps of the requests from `lo` on
        self.lo = sched.arrived

    def length(self, r: int, t: int) -> int:
        """Slots running request r holds at the start of step t."""
        return self.L0[r] + t - self.t0[r]

    def run_to(self, end: int, arrival_s: np.ndarray) -> int:
        """Walk the steps up to `end`, stopping before the first that cannot be taken
        whole; returns the last step walked."""
        lane, cfg, lo = self.lane, self.sched.cfg, self.lo
        total = arrival_s.size
        hi = min(total, lo + 4096)
        steps = arrival_steps(arrival_s[lo:min(hi + 1, total)], self.S, self.step_ms)
        if steps is None:
            return self.S
        if hi < total:  # the first arrival not planned: stop before it
            end = min(end, int(steps[-1]) - 1)
            steps = steps[:hi - lo]
        self.arrivals = steps = steps.tolist()
        ai = 0
        to_finish = len(lane.w) - lane.rejected - lane.done
        t = self.S
        while t < end:
            t += 1
            while ai < len(steps) and steps[ai] <= t:
                ai += 1
            waiting = len(self.front) + lo + ai - self.next_new
            if ((not self.run and not waiting) or len(self.run) > cfg.max_batched_tokens
                    or len(self.finished) >= to_finish or len(self.kinds) > MAX_OPS
                    or not self.step(t, waiting)):
                return t - 1
        return t

    def step(self, t: int, waiting: int) -> bool:
        """Step t, unless it cannot be taken whole (False: nothing changed)."""
        sched, bs, run = self.sched, self.bs, self.run
        openers = self.bucket[t % bs]
        events = self.events
        preempted: list[int] = []
        admitted: list[tuple[int, int, int]] = []  # request, tokens, free after
        refused = None
        if len(openers) <= self.free:  # nobody preempted: the heads are asked in order
            free = self.free - len(openers)
            budget = sched.cfg.max_batched_tokens - len(run)
            nrun, fi, nn, front = len(run), 0, self.next_new, self.front
            while budget > 0 and waiting:
                r = front[fi] if fi < len(front) else nn
                if sched.too_big[r]:
                    return False  # a rejection: stepping logs it
                total = self.wait_known[r] if r in self.wait_known else int(
                    sched.num_tokens[r])
                need = -(-total // bs)  # blocks_to_allocate of a request not live, no hits
                adm, n = sched.verdict(total, 0, nrun, budget, lambda e, need=need, free=free:
                                       sched.space.memory(need, free, e))
                if adm is not None:
                    refused = (r, adm)
                    break
                if n < total:  # a chunk: it would not decode next step
                    return False
                free -= need
                admitted.append((r, total, free * bs))
                nrun += 1
                budget -= n
                waiting -= 1
                if fi < len(front):
                    fi += 1
                else:
                    nn += 1
            self._decode(openers, t)
            for _ in range(fi):
                front.popleft()
            self.next_new = nn
            self.free = free
            for r, total, f in admitted:
                self._join(r, total, t)
                self.free_after.append(f)
        else:
            self._decode_short(openers, t, preempted)
        for r in preempted:  # the step's events in Lane.step's order
            events.append((t, PREEMPTED, r, 0, 0, 0))
        if admitted:
            self.last_fail = None
            for r, total, f in admitted:
                events.append((t, ADMITTED, r, 0, total, f))
        pressure = bool(preempted)
        if refused is not None:
            r, adm = refused
            key = (r, adm.reason.value)
            if key != self.last_fail:  # Lane._fail: one event per (request, reason)
                self.last_fail = key
                self.failures[key[1]] = self.failures.get(key[1], 0) + 1
                events.append((t, FAILED, r, REASON_CODE[key[1]], adm.need_tokens,
                               adm.free_tokens, adm.largest_hole_tokens))
            pressure = pressure or adm.reason is not POLICY
        self.sampled += len(run)
        if t in self.fin:
            self._update(t)
        acc = self.pressure if pressure else self.calm  # Shares.add's sums (see commit)
        acc[0] += 1
        acc[1] += self.used
        acc[2] += self.internal
        acc[3] += self.free
        return True

    def _decode(self, openers: dict[int, None], t: int) -> None:
        """Every running request decodes; each of `openers` takes a block (they fit)."""
        k = len(openers)
        if k:
            self.kinds.extend([TAKE] * k)
            self.seqs.extend(openers)
            self.args.extend([0] * k)
        self._decoded(t)

    def _decoded(self, t: int) -> None:
        """After step t's decodes: the running requests that opened their last block."""
        self.used += len(self.run)
        due = self.lastopen.pop(t, None)
        if due:
            run, t0 = self.run, self.t0
            for r, s in due:
                if r in run and t0[r] == s:  # still running since it was planned
                    self.internal += self.waste[r]

    def _decode_short(self, openers: dict[int, None], t: int, preempted: list[int]) -> None:
        """The decodes when the free blocks do not cover the openers: the first `free` find
        a block (make_room preempts nobody for them); each later one makes room by the rule
        (`make_room`), which may preempt it too."""
        run = self.run
        todo = list(openers)
        k = self.free
        if k:
            self.kinds.extend([TAKE] * k)
            self.seqs.extend(todo[:k])
            self.args.extend([0] * k)
            self.free = 0

        def fits() -> bool:
            return self.free > 0

        def drop(v: int) -> None:
            self._preempt(v, t, preempted)

        kinds, seqs, args = self.kinds, self.seqs, self.args
        for r in todo[k:]:
            if r not in run:  # preempted for an opener before it: so is every later one
                break
            if not make_room(run, r, fits, drop):
                break
            self.free -= 1
            kinds.append(TAKE)
            seqs.append(r)
            args.append(0)
        self._decoded(t)

    def _preempt(self, v: int, t: int, preempted: list[int]) -> None:
        """The rule preempted v (out of `run` already) before its decode in step t."""
        held = self.length(v, t)
        self.wait_gen[v] = self.g0[v] + t - self.t0[v]
        self.wait_known[v] = held + 1
        self._release(v, held)
        self.front.appendleft(v)
        preempted.append(v)
        self.preemptions += 1

    def _release(self, r: int, held: int) -> None:
        """r (out of `run`) frees its blocks with `held` slots written; its running
        bookkeeping ends."""
        bs = self.bs
        self.kinds.append(FREE_SEQ)
        self.seqs.append(r)
        self.args.append(held)
        self.free += -(-held // bs)
        self.used -= held
        if held > self.thr[r]:
            self.internal -= self.waste[r]
        del self.bucket[(self.t0[r] - self.L0[r]) % bs][r]
        due = self.fin.get(self.fstep.pop(r))
        if due is not None:  # (a finishing request's step was popped already)
            del due[r]

    def _join(self, r: int, total: int, t: int) -> None:
        """r is admitted at step t with its whole `total` known tokens: it samples then and
        decodes from step t + 1."""
        bs, sched = self.bs, self.sched
        self.kinds.append(ADMIT)
        self.seqs.append(r)
        self.args.append(total)
        if r in self.wait_known:
            g = self.wait_gen.pop(r) + 1
            del self.wait_known[r]
        else:
            g = int(sched.generated[r]) + 1
        self.run[r] = None
        self.L0[r], self.t0[r], self.g0[r] = total, t + 1, g
        self.bucket[(t + 1 - total) % bs][r] = None
        f = self.fstep[r] = t + int(sched.w.output[r]) - g
        self.fin.setdefault(f, {})[r] = None
        kvf = int(self.lane.kv_final[r])
        last = -(-kvf // bs)
        self.thr[r], self.waste[r] = (last - 1) * bs, last * bs - kvf
        if total > self.thr[r]:
            self.internal += self.waste[r]
        else:
            self.lastopen.setdefault(t + 1 + self.thr[r] - total, []).append((r, t + 1))
        self.used += total

    def _update(self, t: int) -> None:
        """update(): the requests whose output is complete finish, in running order (a
        step's finishers were added to fin[t] in running order: the running requests at the
        walk's start in their order, each admitted one after them)."""
        fins = self.fin.pop(t, None)
        if not fins:
            return
        run, L0, t0 = self.run, self.L0, self.t0
        for r in fins:
            held = L0[r] + t - t0[r] + 1
            del run[r]
            self._release(r, held)
            self.finished[r] = held
            self.events.append((t, FINISHED, r, 0, 0, 0))

    def commit(self, end: int) -> None:
        """Write what the walk did up to step `end` (its last)."""
        lane, sched, a = self.lane, self.sched, self.lane.alloc
        run = list(self.run)
        live_len = [self.L0[r] + end - self.t0[r] + 1 for r in run]
        kind, seq, arg = (np.asarray(x, np.int64) for x in (self.kinds, self.seqs, self.args))
        after, _ = a.replay_window(kind, seq, arg, np.asarray(run, np.int64),
                                   np.asarray(live_len, np.int64))
        if a.free_blocks != self.free or [f * self.bs for f in after] != self.free_after:
            raise RuntimeError("pressure window (kvviz/engine/walk.py): the replay's free "
                               "blocks differ from the walk's")
        comp, known, gen = sched.computed, sched.num_tokens, sched.generated
        out = sched.w.output
        if run:
            r = np.asarray(run, np.int64)
            c = np.asarray(live_len, np.int64)
            comp[r] = c
            known[r] = c + 1
            gen[r] = np.asarray([self.g0[x] + end - self.t0[x] + 1 for x in run], np.int64)
        for x, k in self.wait_known.items():
            comp[x], known[x], gen[x] = 0, k, self.wait_gen[x]
        if self.finished:
            r = np.asarray(list(self.finished), np.int64)
            c = np.asarray(list(self.finished.values()), np.int64)
            comp[r], known[r], gen[r] = c, c + 1, out[r]
        sched.running = run
        sched._ids = None
        sched.front = self.front
        sched.next_new = self.next_new
        sched.arrived = self.lo + bisect_right(self.arrivals, end)
        lane.done += len(self.finished)
        lane.preemptions += self.preemptions
        lane.tokens_generated += self.sampled
        for k, v in self.failures.items():
            lane.failures[k] += v
        lane._last_fail = self.last_fail
        lane.step_no = end
        lane.time_s = end * self.step_ms / 1000.0
        lane.events.add_rows(self.events, lane._code, self.step_ms)
        cap, bs = lane.capacity, self.bs
        for pressure, (steps, used, internal, free) in ((False, self.calm),
                                                        (True, self.pressure)):
            allocated = steps * cap - free * bs  # the tails are the slack: no block shared
            lane.shares.add_sums(pressure, steps, used, allocated - used - internal, internal,
                                 free * bs, allocated - used)
