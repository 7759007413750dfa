"""A child process the dashboard starts and stops (the demo collector, a node scrape).

One at a time per manager, thread-safe (a manager is shared by every browser session), its
output in a log file beside the recording, stopped at interpreter exit. No streamlit.
"""
from __future__ import annotations

import atexit
import os
import subprocess
import threading
import time
import weakref
from pathlib import Path

_ALL: weakref.WeakSet[LoggedProcess] = weakref.WeakSet()


def stop_all() -> None:
    """Stop every child this process started (at exit, and between tests)."""
    for p in list(_ALL):
        p.stop()


atexit.register(stop_all)


def unique_recording(root: Path, prefix: str, suffix: str = ".db") -> Path:
    """root/<prefix>-<time><suffix>, numbered when taken (its .log counts: it comes first)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out, k = root / f"{prefix}-{stamp}{suffix}", 2
    while out.exists() or out.with_suffix(".log").exists():
        out, k = root / f"{prefix}-{stamp}-{k}{suffix}", k + 1
    return out


class LoggedProcess:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._log: Path | None = None
        _ALL.add(self)

    def _launch_locked(self, argv: list[str], out: Path, cwd: Path,
                       env: dict[str, str] | None = None) -> None:
        """Stop the current child, then run argv with its output in out's .log; `env` is
        added to this process's environment."""
        self._stop_locked()
        self._log = out.with_suffix(".log")
        with open(self._log, "wb") as log:
            self._proc = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=log,
                                          stderr=subprocess.STDOUT,
                                          env=None if env is None else {**os.environ, **env})

    def _stop_locked(self, timeout_s: float = 5.0) -> None:
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()  # children close their recordings as "stopped"
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout_s)

    def stop(self) -> None:
        with self._lock:
            self._stop_locked()

    def last_message(self, lines: int = 6, max_bytes: int = 8192) -> str:
        """The last non-blank lines the child printed."""
        if self._log is None or not self._log.exists():
            return ""
        with open(self._log, "rb") as f:
            f.seek(max(0, self._log.stat().st_size - max_bytes))
            text = f.read().decode("utf-8", "replace")
        return "\n".join([ln for ln in text.splitlines() if ln.strip()][-lines:])

    def _state(self) -> tuple[str, int | None, int | None]:
        """(running | stopped | not started, pid, return code)."""
        proc = self._proc
        if proc is None:
            return "not started", None, None
        rc = proc.poll()
        return ("running" if rc is None else "stopped"), proc.pid, rc
