"""JobStatus: what one background job (the demo collector, a node scrape) is doing.

    not started           never launched in this dashboard process
    running               its process is alive
    stopped               it ended cleanly: stopped here, or it finished or stopped itself
                          (exit code 0: an idle stop, a finished workload)
    stopped unexpectedly  killed by a signal nobody here sent (OOM killer, kill -9)
    error                 it exited with an error code (its log tail says why)
"""
from __future__ import annotations

import signal
import time
from typing import NamedTuple

NOT_STARTED, RUNNING, STOPPED = "not started", "running", "stopped"
STOPPED_UNEXPECTEDLY, ERROR = "stopped unexpectedly", "error"
STATES = (NOT_STARTED, RUNNING, STOPPED, STOPPED_UNEXPECTEDLY, ERROR)


class JobStatus(NamedTuple):
    state: str  # one of STATES
    pid: int | None
    returncode: int | None  # None while running; < 0: killed by that signal
    started_at: float | None  # unix time of the launch
    recording: str | None  # file name in the runs directory
    target: str | None  # what it works on (a node URL), None for the demo collector
    last_message: str  # the last lines of its log

    @property
    def uptime_s(self) -> float | None:
        return None if self.started_at is None else max(0.0, time.time() - self.started_at)

    @property
    def exit_text(self) -> str:
        """"exit code 2", "killed by SIGKILL", or "" while it runs."""
        rc = self.returncode
        if rc is None:
            return ""
        if rc < 0:
            try:
                return f"killed by {signal.Signals(-rc).name}"
            except ValueError:
                return f"killed by signal {-rc}"
        return f"exit code {rc}"


def state_of(returncode: int | None, stop_requested: bool) -> str:
    """The state of a launched process from its return code (None: still running)."""
    if returncode is None:
        return RUNNING
    if stop_requested or returncode == 0:
        return STOPPED
    return STOPPED_UNEXPECTEDLY if returncode < 0 else ERROR


NEVER = JobStatus(NOT_STARTED, None, None, None, None, None, "")
