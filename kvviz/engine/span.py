"""Quiet spans: many repeats of one step at once, with exactly stepping's results.

A step is quiet when it logs no event. After any step that preempted nothing, the state
alone says whether the next steps are quiet: every running request decodes, and nobody waits
or the head of the queue would be refused as it was last (`_span_pressure`); the rule
(kvviz/engine/scheduler.py, `Scheduler.quiet_steps` says for how long) then decides the same
at each next step until a request finishes, memory runs short, the head's answer could
change or an arrival matters; in between, each step writes one token per running request.
So a finish, an admission or an eviction costs one stepped step, not two. `advance`
applies such a span at once: one `grow_many` for the blocks
(taken in the order the steps would take them), the blocks filled cached in the steps'
order, and the shares in closed form. Real-mode lanes step one step at a time.

`run_lanes` is Simulation.run for the jumping mode: lanes share only the request stream, so
each lane runs alone into a private event log, merged afterwards in the step order (by step,
then lane).
"""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from kvviz.alloc.base import Reason
from kvviz.core.errors import KvvizError
from kvviz.engine.closedform import block_sums
from kvviz.engine.eventlog import MAX_STEP, EventLog
from kvviz.engine.queue import queue_window
from kvviz.engine.shares import add_repeated
from kvviz.engine.walk import pressure_window
from kvviz.engine.window import window

if TYPE_CHECKING:
    from kvviz.engine.lane import Lane
    from kvviz.engine.simulation import Simulation

MIN_SPAN = 3  # shorter spans: plain steps cost less than a jump


def advance(lane: Lane, m: int, pressure: bool, time_s: float) -> None:
    """Apply m repeats of the last (quiet, decode-only) step; `pressure`: it was a memory-
    pressure step, so is each repeat. Costs O(running requests + blocks taken)."""
    a, sched = lane.alloc, lane.sched
    ids = sched.running_ids()
    n, bs = int(ids.size), a.block_size
    u = a.usage()
    lens = sched.computed[ids]
    total = lane.kv_final[ids]
    used = m * u.used_tokens + n * m * (m + 1) // 2
    held_end, tail_end = block_sums(lens + m, bs)
    held_start, tail_start = block_sums(lens, bs)
    if a.contiguous:
        allocated = m * u.allocated_tokens
        internal = m * int(np.maximum(0, a.seq_allocated_tokens(ids) - total).sum())
    else:
        # new blocks are each request's own; shared (hit) blocks count once in allocated
        grown = held_end - held_start - m * int((-(-lens // bs)).sum())
        allocated = m * u.allocated_tokens + bs * grown
        last = -(-total // bs)  # the block that holds the final slot
        first = np.maximum(lens, (last - 1) * bs)  # length where that block is reached
        inside = np.minimum(np.maximum(lens + m - first, 0), m)
        internal = int((last * bs - total) @ inside)
    efi = 0.0
    if a.contiguous and u.free_tokens > 0:
        efi = 1.0 - a.check(1).largest_hole_tokens / u.free_tokens
    sums = {"used": used, "reserved": allocated - used - internal, "internal": internal,
            "free": m * lane.capacity - allocated, "tail": tail_end - tail_start}
    sh = lane.shares
    for acc in ((sh.pressure, sh.every) if pressure else (sh.every,)):
        acc["steps"] += m
        for k, v in sums.items():
            acc[k] += v
        acc["efi"] = add_repeated(acc["efi"], efi, m)
    plain = a.plain_free_blocks if not a.contiguous else 0
    a.grow_many(ids, m)
    if not a.contiguous and a.usage().evictions > u.evictions:  # log them at their steps
        first = 1 + (-lens) % bs  # the span step whose token opens a request's next block
        count = np.maximum(0, (m - first) // bs + 1)
        at = np.sort(np.repeat(first, count) + bs * (
            np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count, count)))
        at = at[plain:]  # sorted: the evicting steps and how many each
        if at.size:
            new = np.empty(at.size, np.bool_)
            new[0] = True
            np.not_equal(at[1:], at[:-1], out=new[1:])
            st = np.flatnonzero(new)
            per = np.empty(st.size, np.int64)
            per[:-1] = st[1:] - st[:-1]
            per[-1] = at.size - st[-1]
            lane.log_evictions(lane.step_no + at[st], per)
    sched.space.cache_span(ids, lens, m)
    sched.computed[ids] = lens + m
    sched.num_tokens[ids] += m
    sched.generated[ids] += m
    lane.tokens_generated += n * m
    lane.step_no += m
    lane.time_s = time_s


def next_arrival_step(arrival_s: np.ndarray, arrived: int, step_no: int,
                      step_ms: float) -> int | None:
    """The first step after step_no whose clock (step * step_ms / 1000, the step loop's own
    arithmetic) reaches request `arrived`; None when every request has arrived."""
    if arrived >= arrival_s.size:
        return None
    t0 = float(arrival_s[arrived])
    try:
        t = max(step_no + 1, int(np.ceil(t0 * 1000.0 / step_ms)) - 2)
    except OverflowError:
        t = MAX_STEP + 1
    if t > MAX_STEP:
        raise KvvizError(f"the next request arrives at {t0:g} s, more than {MAX_STEP} engine "
                         f"steps of {step_ms:g} ms away: lower its arrival time or raise the "
                         "rate")
    while t * step_ms / 1000.0 < t0:
        t += max(1, t >> 52)  # past 2^53 a float clock cannot tell t from t + 1
    return t


def _span_pressure(lane: Lane) -> bool | None:
    """After a step: whether the next steps may be spanned (`quiet_steps` says how far)
    and, if so, whether they are memory-pressure steps; None: step on. Decided by the state
    alone (whatever the last step logged), unless it preempted: the next steps are quiet
    when nobody waits (no admission, no refusal), when the decodes use the whole budget
    (the head is not asked), or when the head would be refused for the reason it was last
    refused for (no new admit_failed event). A step that
    asked nobody (a prefill chunk used the budget) says nothing about the head's answer."""
    if lane.last_plan.preempted:
        return None
    sched = lane.sched
    if not sched.waiting_count:
        return False
    head = sched.head_refusal()
    if head is None:
        return False
    r, adm = head
    if adm is None or lane.last_fail != (r, adm.reason.value):
        return None
    return adm.reason is not Reason.POLICY


def run_lane(lane: Lane, arrival_s: np.ndarray, step_ms: float, stop: int | None,
             tick: Callable[[], None] | None = None) -> None:
    """Drive one lane to the end (or to step `stop`): Lane.step, then the windows that
    start after it (window.py, queue.py, walk.py) or `advance` over a quiet span. Idle
    time (nothing running or waiting) is skipped to the step of the next arrival."""
    jumps = lane.kv is None
    calls = 0
    while not lane.finished and (stop is None or lane.step_no < stop):
        calls += 1
        if tick is not None and calls % 256 == 0:
            tick()
        if lane.idle:
            nxt = next_arrival_step(arrival_s, lane.arrived, lane.step_no, step_ms)
            if nxt is not None and nxt - 1 > lane.step_no:
                k = nxt - 1 - lane.step_no if stop is None else min(nxt - 1, stop) - lane.step_no
                if k > 0:
                    lane.skip_idle(k, (lane.step_no + k) * step_ms / 1000.0)
                    continue
        now = (lane.step_no + 1) * step_ms / 1000.0
        a = lane.arrived  # (sorted arrivals: the search finds more only if the next came)
        if a < arrival_s.size and arrival_s[a] <= now:
            lane.arrive(int(np.searchsorted(arrival_s, now, side="right")))
        lane.step(now)
        if not jumps or lane.finished:
            continue
        if window(lane, arrival_s, step_ms, stop) or queue_window(lane, arrival_s, step_ms,
                                                                   stop):
            while not lane.finished and (window(lane, arrival_s, step_ms, stop)
                                         or queue_window(lane, arrival_s, step_ms, stop)):
                pass
            continue
        if pressure_window(lane, arrival_s, step_ms, stop):
            continue
        pressure = _span_pressure(lane)
        if pressure is None:
            continue
        limit = (1 << 62) if stop is None else stop - lane.step_no
        if lane.waiting_count == 0:  # an arrival matters only when nobody waits
            nxt = next_arrival_step(arrival_s, lane.arrived, lane.step_no, step_ms)
            if nxt is not None:
                limit = min(limit, nxt - lane.step_no - 1)
        m = lane.sched.quiet_steps(limit) if limit > 0 else 0
        if m >= MIN_SPAN:
            advance(lane, m, pressure, (lane.step_no + m) * step_ms / 1000.0)


def run_lanes(sim: Simulation, max_steps: int | None,
              progress: Callable[[int, int], None] | None) -> None:
    """Simulation.run for the jumping mode: each lane alone, event logs merged in the
    step order. Real-mode lanes step together."""
    total = len(sim.workload)
    if any(x.kv is not None for x in sim.lanes):
        while not sim.finished and (max_steps is None or sim.step_no < max_steps):
            sim.step()
            if progress is not None and sim.step_no % 256 == 0:
                progress(min(x.done + x.rejected for x in sim.lanes), total)
        return
    shared, parts = sim.events, []

    def tick() -> None:  # lanes run one after another: report their mean progress
        progress(sum(x.done + x.rejected for x in sim.lanes) // len(sim.lanes), total)

    for pos, lane in enumerate(sim.lanes):
        if lane.finished:
            continue
        own = EventLog()
        own.lanes = list(shared.lanes)
        lane.events = own
        t0 = time.perf_counter()
        try:
            run_lane(lane, sim.arrival_s, sim.engine.step_ms, max_steps,
                     None if progress is None else tick)
        finally:
            lane.events = shared
            lane.wall_seconds += time.perf_counter() - t0
        parts.append((own.since(0)[0], pos))
        sim.step_no = max(sim.step_no, lane.step_no)
        if progress is not None:
            tick()
    if parts:
        pos = np.concatenate([np.full(len(c), p, np.int64) for c, p in parts])
        step = np.concatenate([c["step"] for c, _ in parts])
        order = np.lexsort((np.arange(pos.size), pos, step))
        shared.merge([c for c, _ in parts], order)
