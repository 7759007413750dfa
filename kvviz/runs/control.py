"""Pause and single-step of a running collector, through a small file beside its recording.

The dashboard (kvviz.runs.jobs.Collector) starts the demo collector with
    KVVIZ_CONTROL_FILE  runs/live-<time>.control, a JSON object {"paused": bool, "steps": n}
and writes that file when a teacher presses Pause, Resume or Step; `steps` counts the Step
presses so far (it only grows), so a press is never lost or done twice, whenever the collector
looks. The collector (collectors/engine_collector.py) reads the file when its modification
time changes (a stat at most every POLL_S): while paused its engine clock stands still (no
arrivals, no steps), it still writes a sample every PAUSED_SAMPLE_S so readers see it alive,
and each new step request runs one engine step at one step's time and records it at once.

Missing, unreadable or malformed: not paused (a collector never stops for a bad file).
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import NamedTuple

CONTROL_ENV = "KVVIZ_CONTROL_FILE"
POLL_S = 0.1
PAUSED_SAMPLE_S = 2.0
MAX_BYTES = 4096


class Control(NamedTuple):
    paused: bool = False
    steps: int = 0  # Step presses so far (only grows)


def read(path: Path) -> Control:
    """The control in `path`; Control() when it is missing or not a valid one."""
    try:
        with open(path, "rb") as f:
            data = json.loads(f.read(MAX_BYTES))
    except (OSError, ValueError):
        return Control()
    if not isinstance(data, dict):
        return Control()
    paused, steps = data.get("paused"), data.get("steps")
    if not isinstance(paused, bool) or not isinstance(steps, int) or isinstance(steps, bool):
        return Control()
    return Control(paused, max(0, steps))


def write(path: Path, control: Control) -> None:
    """Replace `path` with `control` atomically (a reader never sees half a file)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(control._asdict()))
    os.replace(tmp, path)


class Watcher:
    """The collector's side: `poll()` returns the latest control, reading the file only
    when it changed and at most every POLL_S."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.control = Control()
        self._checked = 0.0
        self._mtime: int | None = None

    @classmethod
    def from_env(cls, environ: dict | None = None) -> Watcher:
        raw = (environ if environ is not None else os.environ).get(CONTROL_ENV, "")
        return cls(Path(raw) if raw else None)

    def poll(self, now: float | None = None) -> Control:
        if self.path is None:
            return self.control
        now = time.monotonic() if now is None else now
        if now - self._checked < POLL_S:
            return self.control
        self._checked = now
        try:
            mtime = self.path.stat().st_mtime_ns
        except OSError:
            return self.control
        if mtime != self._mtime:
            self._mtime = mtime
            self.control = read(self.path)
        return self.control
