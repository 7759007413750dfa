"""Lanes in lockstep: one request stream, several allocators, identical arrivals.

Every lane runs the one compiled scheduling rule (kvviz/engine/rule). Lanes share only the
request stream, so run() runs each lane alone on its own clock (one compiled call; idle
time up to the next arrival is jumped over), lanes side by side in threads (the compiled
loop releases the GIL), and merges the event logs in the step order (by step, then lane).
step() advances every lane one step at a caller's clock (a live collector, real mode's KV
executor, Learn).
"""
from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait

import numpy as np

from kvviz.core.config import CacheConfig, EngineConfig, LaneSpec
from kvviz.core.workload import Workload
from kvviz.engine.eventlog import MAX_STEP, EventLog
from kvviz.engine.lane import KVExecutor, Lane
from kvviz.engine.rule.build import arrival_steps, check_arrivals

# run()'s advance modes: "jump" runs each lane alone (one compiled call each), "step" steps
# all lanes together from Python; the same results.
ENGINES = ("jump", "step")
CHUNK = 1 << 16  # steps per compiled call while a progress callback listens
LANE_THREADS = os.cpu_count() or 1  # run(): lanes side by side in this many threads
PROGRESS_S = 0.1  # how often run() reports progress while lanes run in threads


def _in_step_order(step: np.ndarray) -> bool:
    return bool(np.all(step[1:] >= step[:-1]))


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
        self._arrival = workload.arrival_s
        self._steps = arrival_steps(self._arrival, self.engine.step_ms)
        for spec in lanes:
            name = spec.label
            k = 2
            while name in names:  # the same spec twice gets a suffix
                name = f"{spec.label}#{k}"
                k += 1
            names.add(name)
            self.events.lane_code(name)
            self.lanes.append(Lane(name, spec, workload, self.engine, cache.capacity_tokens,
                                   bpt, self._steps, kv_factory))
        self.step_no = 0
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
        s = int(self._steps[nxt])
        if s >= MAX_STEP:
            check_arrivals(self._arrival[nxt:nxt + 1], self.engine.step_ms)
        return max(0, s - 1 - self.step_no)

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
        lanes = tuple(self.events.lanes)
        for code, lane in enumerate(self.lanes):
            if not lane.finished:
                t0 = time.perf_counter()
                lane.step_at(upto, now)
                self.events.extend(lane.drain(code, lanes))
                lane.wall_seconds += time.perf_counter() - t0

    def run(self, max_steps: int | None = None,
            progress: Callable[[int, int], None] | None = None) -> list[dict]:
        """Step until every request finished (or max_steps); returns one summary per lane."""
        t0 = time.perf_counter()
        if self.advance == "jump" and all(lane.kv is None and lane.after_schedule is None
                                          for lane in self.lanes):
            self._run_lanes(max_steps, progress)
        else:
            self._run_together(max_steps, progress)
        self.wall_seconds += time.perf_counter() - t0
        return self.summaries()

    def _run_lanes(self, max_steps: int | None, progress) -> None:
        """Each lane alone on its own clock; the logs merged by step, then lane."""
        if max_steps is None:  # a request past the last step: the error stepping gives
            check_arrivals(self._arrival, self.engine.step_ms)
        total, lanes = len(self.workload), tuple(self.events.lanes)
        limit = math.inf if max_steps is None else max_steps

        def report() -> None:
            if progress is not None:
                progress(sum(x.done + x.rejected for x in self.lanes) // len(self.lanes), total)

        workers = min(len(self.lanes), LANE_THREADS)
        if workers == 1:
            for lane in self.lanes:
                self._run_lane(lane, limit, report if progress is not None else None)
        else:  # the compiled loop releases the GIL: lanes side by side, progress from here
            with ThreadPoolExecutor(workers, thread_name_prefix="kvviz-lane") as ex:
                running = [ex.submit(self._run_lane, lane, limit, None) for lane in self.lanes]
                while wait(running, timeout=PROGRESS_S)[1]:
                    report()
                for f in running:
                    f.result()
                report()
        parts = [lane.drain(code, lanes, copy=False)  # the log copies them below
                 for code, lane in enumerate(self.lanes)]
        self.step_no = max([self.step_no] + [lane.step_no for lane in self.lanes])
        if len(parts) == 1 and _in_step_order(parts[0]["step"]):
            # one lane's log is already in step order: the log takes its columns
            self.lanes[0].hand_over_events()
            self.events.extend(parts[0], owned=True)
        elif sum(len(c) for c in parts):
            step = np.concatenate([c["step"] for c in parts])
            lane_of = np.concatenate([c["lane"] for c in parts]).astype(np.int64)
            order = np.lexsort((np.arange(step.size), lane_of, step))
            self.events.merge(parts, order)

    def _run_lane(self, lane: Lane, limit: float, report: Callable[[], None] | None) -> None:
        """One lane to the end (or `limit`); with `report`, in chunks with a report after
        each."""
        t0 = time.perf_counter()
        while not lane.finished and lane.step_no < limit:
            until = limit if report is None else min(limit, self._chunk_end(lane))
            lane.run(None if until == math.inf else int(until))
            if report is not None:
                report()
        lane.wall_seconds += time.perf_counter() - t0

    @staticmethod
    def _chunk_end(lane: Lane) -> int:
        """Where one compiled call stops while a progress bar listens: CHUNK steps of work,
        counted from the next arrival when the lane is idle (the rule jumps over idle time
        at once; counting it would make a trace with a long silence take ~10^6 calls)."""
        start = lane.step_no
        if lane.idle and lane.arrived < len(lane.w):
            start = max(start, int(lane.req.arrival_step[lane.arrived]))
        return start + CHUNK

    def _run_together(self, max_steps: int | None, progress) -> None:
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
