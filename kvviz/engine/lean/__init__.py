"""The lean lane: the jumping engine's event model in plain Python, for runs to the end.

`run_lean` drives one lane from its first step to its last with the same steps, events and
share sums as Lane.step (and so as the step engine), but keeps the lane's state in Python
ints, lists and dicts (kvviz/engine/lean/queue.py, paged.py, contiguous.py) instead of the
allocator and numpy arrays: an event costs microseconds, whatever the number of running
sequences. It takes no block maps, so a lane runs lean only when nobody samples it (a
`Simulation.run` without max_steps) and `lane_can_lean` says the model covers it; the Lane
object gets the summary counters at the end, its allocator stays untouched (empty, as a
finished lane's is).
"""
from __future__ import annotations

import math
from array import array
from collections.abc import Callable

import numpy as np

from kvviz.engine.events import FIELDS, MAX_STEP, EventColumns
from kvviz.engine.jump import FAR, lane_can_jump, next_arrival_step
from kvviz.engine.lane import Lane
from kvviz.engine.lean.contiguous import LeanContiguous
from kvviz.engine.lean.paged import LeanPaged
from kvviz.engine.shares import add_repeated

TICK = 4096  # loop turns between progress reports


def lane_can_lean(lane: Lane) -> bool:
    """A fresh sim-mode lane the lean model covers: paged without sharing (lane_can_jump's
    rule), or contiguous over slot cells whose reservation holds every request that can
    run; every request generates at least one token."""
    if lane.step_no or lane.done or lane.rejected or not lane_can_jump(lane):
        return False
    if len(lane.w) and int(lane.w.output.min()) < 1:
        return False
    if lane.alloc.contiguous:
        return lane.alloc.block_size == 1 and bool(
            ((lane.reserve >= lane.final_len) | lane.too_big).all())
    return True


def run_lean(lane: Lane, arrival_s: np.ndarray, step_ms: float, stop: int | None = None,
             tick: Callable[[], None] | None = None) -> EventColumns:
    """Run the lane to the end (or to step `stop`, for tests: then only its summary is
    meaningful); returns its events."""
    m = LeanContiguous(lane) if lane.alloc.contiguous else LeanPaged(lane)
    arr = arrival_s.tolist()
    steps = _arrival_steps(arrival_s, step_ms)
    total = len(arr)
    ap = 0
    events, front = m.events, m.front
    # share sums: every step (e_*) and memory-pressure steps (p_*), added to Shares at the end
    e_steps = e_used = e_res = e_int = e_free = e_tail = 0
    p_steps = p_used = p_res = p_int = p_free = p_tail = 0
    e_efi, p_efi = float(lane.shares.every["efi"]), float(lane.shares.pressure["efi"])
    turns = 0
    decode, finish, schedule, step_sums = m.decode, m.finish, m.schedule, m.step_sums
    fins, jp = m.fins, m.just_preempted
    while m.done + m.rejected < total and (stop is None or m.T < stop):
        turns += 1
        if tick is not None and turns % TICK == 0:
            lane.done, lane.rejected = m.done, m.rejected
            tick()
        m.T = T = m.T + 1
        now = T * step_ms / 1000.0
        while ap < total and arr[ap] <= now:
            ap += 1
        if ap > m.arrived:
            m.arrived = ap
        logged = len(events)
        m.pressure = False
        if jp:
            jp.clear()
        decode()
        if fins and fins[0][0] <= T:
            finish()
        if front or m.arrived > m.next_new:
            schedule()
        used, res, internal, free, tail, efi = step_sums()
        pressed = m.pressure
        e_steps += 1
        e_used += used
        e_res += res
        e_int += internal
        e_free += free
        e_tail += tail
        if efi:  # adding 0.0 changes no float sum
            e_efi += efi
        if pressed:
            p_steps += 1
            p_used += used
            p_res += res
            p_int += internal
            p_free += free
            p_tail += tail
            if efi:
                p_efi += efi
        if m.done + m.rejected >= total:
            break
        quiet = len(events) == logged
        waiting = len(front) + m.arrived - m.next_new
        if not (quiet or waiting == 0):
            continue
        limit = FAR if stop is None else stop - T
        if waiting == 0 and m.arrived < total:
            nxt = (_arrival_step(arrival_s, arr, m.arrived, T, step_ms) if steps is None
                   else max(T + 1, steps[m.arrived]))
            limit = min(limit, nxt - T - 1)
        k = m.horizon(limit) if limit > 0 else 0
        if 0 < k < FAR:
            used, res, internal, free, tail = m.span(k)
            e_steps += k
            e_used += used
            e_res += res
            e_int += internal
            e_free += free
            e_tail += tail
            if efi:
                e_efi = add_repeated(e_efi, efi, k)
            if quiet and pressed:
                p_steps += k
                p_used += used
                p_res += res
                p_int += internal
                p_free += free
                p_tail += tail
                if efi:
                    p_efi = add_repeated(p_efi, efi, k)
    for acc, vals, efi in ((lane.shares.every, (e_steps, e_used, e_res, e_int, e_free, e_tail),
                            e_efi),
                           (lane.shares.pressure, (p_steps, p_used, p_res, p_int, p_free,
                                                   p_tail), p_efi)):
        if vals[0]:
            for key, v in zip(("steps", "used", "reserved", "internal", "free", "tail"), vals):
                acc[key] += v
            acc["efi"] = efi
    m.write_back(lane)
    return _columns(events, lane._code, step_ms, lane.events.lanes)


def _arrival_step(arrival_s: np.ndarray, arr: list[float], i: int, T: int,
                  step_ms: float) -> int:
    """next_arrival_step in plain Python (the same arithmetic), for request i."""
    a = arr[i]
    try:
        t = max(T + 1, math.ceil(a * 1000.0 / step_ms) - 2)
    except OverflowError:
        t = MAX_STEP + 1
    if t > MAX_STEP:  # the step engine's error
        return next_arrival_step(arrival_s, i, T, step_ms)
    while t * step_ms / 1000.0 < a:
        t += max(1, t >> 52)
    return t


def _arrival_steps(arrival_s: np.ndarray, step_ms: float) -> list[int] | None:
    """Per request, the first step whose clock reaches its arrival (the arithmetic of
    next_arrival_step, all at once); None when some arrival is too far for that."""
    a = np.asarray(arrival_s, np.float64)
    if not a.size:
        return []
    if not np.isfinite(a).all():
        return None
    s0 = np.ceil(a * 1000.0 / step_ms) - 2
    if s0.max() > 2**50:
        return None
    s = s0.astype(np.int64)
    while True:
        low = s * step_ms / 1000.0 < a
        if not low.any():
            return s.tolist()
        s[low] += 1


def _columns(events: array, code: int, step_ms: float, lanes) -> EventColumns:
    """Events, seven int64 each (step, kind, seq, reason, need, free, largest), as
    EventColumns."""
    a = np.frombuffer(events, np.int64).reshape(-1, 7) if len(events) else np.zeros((0, 7),
                                                                                  np.int64)
    k = a.shape[0]
    step = a[:, 0].copy()
    cols = {"time_s": step * step_ms / 1000.0, "step": step,
            "lane": np.full(k, code, np.int8), "kind": a[:, 1].astype(np.int8),
            "seq_id": a[:, 2].copy(), "reason": a[:, 3].astype(np.int8),
            "need_tokens": a[:, 4].copy(), "free_tokens": a[:, 5].copy(),
            "largest_hole_tokens": a[:, 6].copy(), "count": np.ones(k, np.int64)}
    return EventColumns({f: cols[f] for f in FIELDS}, lanes)
