"""The demo collector's pause and single-step (the engine side of kvviz/runs/control.py)."""
from __future__ import annotations

import time

from kvviz.runs import control


class Pause:
    """The collector's pause and single-step (kvviz/runs/control.py): while paused the engine
    clock stands at `frozen`; each Step press moves it on by one step (`dt` seconds); on
    resume `offset` (the time spent paused) is taken off the wall clock."""

    def __init__(self, watcher: control.Watcher, dt: float) -> None:
        self.watcher, self.dt = watcher, dt
        self.paused, self.frozen, self.offset = False, 0.0, 0.0
        self.done = watcher.poll().steps  # presses from before this collector do not count
        self._ctl = control.Control()
        self._sampled = 0.0

    def active(self, t0: float, quiet: bool) -> bool:
        """Read the control; True while paused (pausing or resuming the clock as asked)."""
        self._ctl = self.watcher.poll()
        wall = time.perf_counter() - t0
        if self._ctl.paused and not self.paused:
            self.paused, self.frozen, self._sampled = True, wall - self.offset, 0.0  # record it
            print(f"paused at t = {self.frozen:.2f} s", flush=True)
        elif not self._ctl.paused and self.paused:
            self.paused, self.offset = False, wall - self.frozen
            print(f"resumed at t = {self.frozen:.2f} s", flush=True)
        if not self.paused:
            self.done = max(self.done, self._ctl.steps)  # a Step press while running: ignored
        return self.paused

    def step_due(self) -> bool:
        if self._ctl.steps <= self.done:
            return False
        self.done += 1
        self.frozen += self.dt
        return True

    def stepped(self, step_no: int) -> None:
        self._sampled = time.monotonic()
        print(f"stepped to t = {self.frozen:.2f} s (engine step {step_no})", flush=True)

    def sample_due(self) -> bool:
        now = time.monotonic()
        if now - self._sampled < control.PAUSED_SAMPLE_S:
            return False
        self._sampled = now
        return True
