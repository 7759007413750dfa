"""Lanes in lockstep: one request stream, several allocators, identical arrivals."""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np

from kvviz.alloc import make_allocator
from kvviz.config import CacheConfig, EngineConfig, LaneSpec
from kvviz.engine.events import EventLog
from kvviz.engine.jump import ENGINES, run_jumping
from kvviz.engine.lane import KVExecutor, Lane
from kvviz.workload import Workload


class Simulation:
    def __init__(
        self, workload: Workload, lanes: Sequence[LaneSpec], cache: CacheConfig,
        engine: EngineConfig | None = None,
        kv_factory: Callable[[object], KVExecutor] | None = None,
        advance: str = "jump",
    ) -> None:
        if advance not in ENGINES:
            raise ValueError(f"advance: {advance!r}; use one of {list(ENGINES)}")
        self.advance = advance  # run(): "jump" between events (exact) or "step" one by one
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
            alloc = make_allocator(spec, cache.tokens, bpt)
            kv = kv_factory(alloc) if kv_factory else None
            self.lanes.append(Lane(name, spec, alloc, workload, self.engine, self.events, kv))
        self.step_no = 0
        self._arrival = workload.arrival_s
        self.wall_seconds = 0.0

    @property
    def time_s(self) -> float:
        return self.step_no * self.engine.step_ms / 1000.0

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
            run_jumping(self, max_steps, progress)
            self.wall_seconds += time.perf_counter() - t0
            return self.summaries()
        total = len(self.workload)
        while not self.finished and (max_steps is None or self.step_no < max_steps):
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
