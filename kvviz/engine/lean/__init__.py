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

from collections.abc import Callable

import numpy as np

from kvviz.engine.events import FIELDS, EventColumns
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
    total = len(arr)
    ap = 0
    every, pressure_acc = lane.shares.every, lane.shares.pressure
    events = m.events
    turns = 0
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
        m.just_preempted.clear()
        m.decode()
        m.finish()
        m.schedule()
        used, reserved, internal, free, tail, efi = m.step_sums()
        pressed = m.pressure
        for acc in ((pressure_acc, every) if pressed else (every,)):
            acc["steps"] += 1
            acc["used"] += used
            acc["reserved"] += reserved
            acc["internal"] += internal
            acc["free"] += free
            acc["tail"] += tail
            acc["efi"] = add_repeated(acc["efi"], efi, 1)
        if m.done + m.rejected >= total:
            break
        quiet = len(events) == logged
        waiting = m.waiting
        if not (quiet or waiting == 0):
            continue
        limit = FAR if stop is None else stop - T
        if waiting == 0:
            nxt = next_arrival_step(arrival_s, m.arrived, T, step_ms)
            if nxt is not None:
                limit = min(limit, nxt - T - 1)
        k = m.horizon(limit) if limit > 0 else 0
        if 0 < k < FAR:
            sums = m.span(k)
            for acc in ((pressure_acc, every) if quiet and pressed else (every,)):
                acc["steps"] += k
                acc["used"] += sums[0]
                acc["reserved"] += sums[1]
                acc["internal"] += sums[2]
                acc["free"] += sums[3]
                acc["tail"] += sums[4]
                acc["efi"] = add_repeated(acc["efi"], efi, k)
    m.write_back(lane)
    return _columns(events, lane._code, step_ms, lane.events.lanes)


def _columns(events: list[tuple], code: int, step_ms: float, lanes) -> EventColumns:
    """Event tuples (step, kind, seq, reason, need, free, largest) as EventColumns."""
    a = np.array(events, np.int64).reshape(len(events), 7)
    step = a[:, 0].copy()
    cols = {"time_s": step * step_ms / 1000.0, "step": step,
            "lane": np.full(len(events), code, np.int8), "kind": a[:, 1].astype(np.int8),
            "seq_id": a[:, 2].copy(), "reason": a[:, 3].astype(np.int8),
            "need_tokens": a[:, 4].copy(), "free_tokens": a[:, 5].copy(),
            "largest_hole_tokens": a[:, 6].copy(), "count": np.ones(len(events), np.int64)}
    return EventColumns({f: cols[f] for f in FIELDS}, lanes)
