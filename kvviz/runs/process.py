"""A child process the dashboard starts and stops, its output in a log beside its recording.

One child at a time per LoggedProcess, thread-safe (a job is shared by every browser
session), stopped at interpreter exit. No streamlit. Every child gets KVVIZ_PARENT_PID (this
process) so that it stops itself when this process is killed (kvviz/runs/lifecycle.py).
"""
from __future__ import annotations

import atexit
import os
import subprocess
import threading
import time
import weakref
from pathlib import Path

from kvviz.runs import lifecycle
from kvviz.runs.directory import LOG_SUFFIX
from kvviz.runs.status import NEVER, JobStatus, state_of

_ALL: weakref.WeakSet[LoggedProcess] = weakref.WeakSet()


def stop_all() -> None:
    """Stop every child this process started (at exit, and between tests)."""
    for p in list(_ALL):
        p.stop()


atexit.register(stop_all)


class LoggedProcess:
    LOG_LINES = 6  # lines of log shown in the status

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._log: Path | None = None
        self._stop_requested = False
        self.recording: Path | None = None
        self.started_at: float | None = None
        _ALL.add(self)

    def _launch_locked(self, argv: list[str], out: Path, cwd: Path,
                       env: dict[str, str] | None = None) -> None:
        """Stop the current child, then run argv recording into `out`, its output in out's
        .log; `env` is added to this process's environment, and KVVIZ_PARENT_PID."""
        self._stop_locked()
        self._log = out.with_suffix(LOG_SUFFIX)
        env = {**os.environ, lifecycle.PARENT_ENV: str(os.getpid()), **(env or {})}
        with open(self._log, "wb") as log:
            self._proc = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=log,
                                          stderr=subprocess.STDOUT, env=env)
        self._stop_requested = False
        self.recording, self.started_at = out, time.time()

    def _stop_locked(self, timeout_s: float = 5.0) -> None:
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        self._stop_requested = True
        proc.terminate()  # children close their recordings as "stopped"
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout_s)

    def stop(self) -> None:
        with self._lock:
            self._stop_locked()

    def last_message(self, lines: int | None = None, max_bytes: int = 8192) -> str:
        """The last non-blank lines the child printed."""
        if self._log is None or not self._log.exists():
            return ""
        with open(self._log, "rb") as f:
            f.seek(max(0, self._log.stat().st_size - max_bytes))
            text = f.read().decode("utf-8", "replace")
        keep = [ln for ln in text.splitlines() if ln.strip()]
        return "\n".join(keep[-(lines or self.LOG_LINES):])

    def target(self) -> str | None:
        """What the job works on, shown beside its state (None: nothing to name)."""
        return None

    def status(self) -> JobStatus:
        proc = self._proc
        if proc is None:
            return NEVER
        rc = proc.poll()
        return JobStatus(state_of(rc, self._stop_requested), proc.pid, rc, self.started_at,
                         self.recording.name if self.recording else None, self.target(),
                         self.last_message())
