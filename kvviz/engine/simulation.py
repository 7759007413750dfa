"""Lanes in lockstep: one request stream, several allocators, identical arrivals.

Every lane steps the one scheduling rule (kvviz/engine/scheduler.py). run() jumps over idle
time (no lane has a request running or waiting) straight to the step of the next arrival, so
a sparse stream costs steps with work, not simulated seconds.
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence

import numpy as np

from kvviz.alloc import make_allocator
from kvviz.core.config import CacheConfig, EngineConfig, LaneSpec
from kvviz.core.errors import KvvizError
from kvviz.core.workload import Workload
from kvviz.engine.eventlog import MAX_STEP, EventLog
from kvviz.engine.lane import KVExecutor, Lane
from kvviz.engine.span import run_lanes

# run()'s advance modes: "jump" runs each lane alone and applies quiet spans at once
# (kvviz/engine/span.py), "step" steps all lanes together; the same results.
ENGINES = ("jump", "step")


class Simulation:
    def __init__(
        self, workload: Workload, lanes: Sequence[LaneSpec], cache: CacheConfig,
        engine: EngineConfig | None = None,
        kv_factory: Callable[[object], KVExecutor] | None = None,
        advance: str = "jump",
    ) -> None:
        if advance not in ENGINES:
            raise ValueError(f"advance: {advance!r}; use one of {list(ENGINES)}")
        self.advance = advance
        if not lanes:
            raise ValueError("lanes: give at least one lane")
        self.workload = workload
        self.engine = engine or EngineConfig()
        self.cache = cache
        self.events = EventLog()
        self.lanes: list[Lane] = []
        names: set[str] = set()
        bpt = cache.model.kv_bytes_per_token
        for spec in lanes:
            name = spec.label
            k = 2
            while name in names:  # the same spec twice gets a suffix
                name = f"{spec.label}#{k}"
                k += 1
            names.add(name)
            alloc = make_allocator(spec, cache.capacity_tokens, bpt)
            kv = kv_factory(alloc) if kv_factory else None
            self.lanes.append(Lane(name, spec, alloc, workload, self.engine, self.events, kv))
        self.step_no = 0
        self._arrival = workload.arrival_s
        self.wall_seconds = 0.0

    @property
    def arrival_s(self) -> np.ndarray:
        """Arrival times of the workload's requests (sorted)."""
        return self._arrival

    @property
    def time_s(self) -> float:
        return self._clock(self.step_no)

    def _clock(self, step_no: int) -> float:
        return step_no * self.engine.step_ms / 1000.0

    def _idle_steps(self) -> int:
        """How many of the next steps would be idle on every unfinished lane: nothing runs,
        nothing waits, and the next request arrives only later (0 when there is work)."""
        live = [lane for lane in self.lanes if not lane.finished]
        if not live or not all(lane.idle for lane in live):
            return 0
        nxt = max(lane.arrived for lane in live)
        if nxt >= len(self._arrival):
            return 0
        return self._arrival_step(float(self._arrival[nxt])) - 1 - self.step_no

    def _arrival_step(self, arrival_s: float) -> int:
        """The first step whose clock reaches `arrival_s` (as step() compares them)."""
        try:
            s = max(self.step_no + 1, math.ceil(arrival_s * 1000.0 / self.engine.step_ms))
        except OverflowError:
            s = MAX_STEP + 1
        if s > MAX_STEP:
            raise KvvizError(f"the next request arrives at {arrival_s:g} s, more than "
                             f"{MAX_STEP} engine steps of {self.engine.step_ms:g} ms away: "
                             "lower its arrival time or raise the rate")
        while self._clock(s) < arrival_s:
            s += max(1, s >> 52)  # past 2^53 a float clock cannot tell s from s + 1
        while s - 1 > self.step_no and self._clock(s - 1) >= arrival_s:
            s -= 1
        return s

    def skip_idle(self, k: int) -> None:
        """Advance k idle steps at once, with the same result as k calls of step()."""
        last = self.step_no + k
        for lane in self.lanes:
            if not lane.finished:
                lane.skip_idle(k, self._clock(last))
        self.step_no = last

    @property
    def finished(self) -> bool:
        return all(lane.finished for lane in self.lanes)

    def step(self, time_s: float | None = None) -> None:
        """One engine step on every unfinished lane. `time_s` overrides the simulated clock."""
        self.step_no += 1
        now = self.time_s if time_s is None else time_s
        upto = int(np.searchsorted(self._arrival, now, side="right"))
        for lane in self.lanes:
            if not lane.finished:
                t0 = time.perf_counter()
                lane.arrive(upto)
                lane.step(now)
                lane.wall_seconds += time.perf_counter() - t0

    def run(self, max_steps: int | None = None,
            progress: Callable[[int, int], None] | None = None) -> list[dict]:
        """Step until every request finished (or max_steps); returns one summary per lane."""
        t0 = time.perf_counter()
        if self.advance == "jump":
            run_lanes(self, max_steps, progress)
            self.wall_seconds += time.perf_counter() - t0
            return self.summaries()
        total = len(self.workload)
        while not self.finished and (max_steps is None or self.step_no < max_steps):
            idle = self._idle_steps()  # sparse arrivals: jump over the idle time
            if idle > 0:
                self.skip_idle(idle if max_steps is None else
                               min(idle, max_steps - self.step_no))
                if progress is not None:
                    progress(min(lane.done + lane.rejected for lane in self.lanes), total)
                continue
            self.step()
            if progress is not None and self.step_no % 256 == 0:
                progress(min(lane.done + lane.rejected for lane in self.lanes), total)
        self.wall_seconds += time.perf_counter() - t0
        return self.summaries()

    def summaries(self) -> list[dict]:
        out = []
        for lane in self.lanes:
            s = lane.summary()
            s["wall_seconds"] = lane.wall_seconds
            out.append(s)
        return out

    def lane(self, name: str) -> Lane:
        for lane in self.lanes:
            if lane.name == name:
                return lane
        raise KeyError(f"no lane named {name!r}; lanes: {[x.name for x in self.lanes]}")
