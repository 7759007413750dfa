"""When a child the dashboard started (the demo collector, a node scrape) stops on its own:
its parent is gone, or no one has watched it for a while (docs/DASHBOARD.md, "Lifecycle").

The dashboard (kvviz.runs.jobs.Collector) starts `python -m collectors` with
    KVVIZ_PARENT_PID  its own pid: when this process's parent is no longer that pid (the
                      dashboard died and the child was re-parented), the collector stops;
    KVVIZ_VIEWER_FILE a file the Live page touches while a tab shows the live collector;
    KVVIZ_IDLE_STOP_S with no touch for that many seconds (default 900; 0 = never), it stops.
A watcher thread checks both every WATCH_EVERY_S and stops the collector the way a signal
would (SIGTERM to itself: the recording closes as "stopped" with the reason below). Polling
getppid, not PR_SET_PDEATHSIG: Linux sends that signal when the *thread* that started the
child exits, and Streamlit starts it from a short-lived script thread. Every job the dashboard
starts (kvviz.runs.process.LoggedProcess) gets KVVIZ_PARENT_PID and calls `watch` first thing:
the Node page's scrape job and KV-event recording job get no viewer file, so they stop only
when the dashboard is gone.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

PARENT_ENV, VIEWER_ENV, IDLE_ENV = "KVVIZ_PARENT_PID", "KVVIZ_VIEWER_FILE", "KVVIZ_IDLE_STOP_S"
IDLE_STOP_S = 900.0
WATCH_EVERY_S = 0.5
_reason: str | None = None


def stop_reason() -> str | None:
    """Why the watcher stopped this process (None: it did not)."""
    return _reason


def idle_stop_s(environ: dict | None = None) -> float:
    """KVVIZ_IDLE_STOP_S as seconds (0: never); ValueError names a bad value."""
    raw = (environ if environ is not None else os.environ).get(IDLE_ENV, "").strip()
    if not raw:
        return IDLE_STOP_S
    try:
        val = float(raw)
    except ValueError:
        val = float("nan")
    if not (0 <= val < 10**9):
        raise ValueError(f"{IDLE_ENV}: expected seconds in [0, 1e9) (0 = never), got {raw!r}")
    return val


def why_stop(parent: int | None, viewer: Path | None, idle_s: float,
             now: float | None = None) -> str | None:
    """The reason to stop now, or None: the parent is gone, or the viewer file is stale."""
    if parent is not None and os.getppid() != parent:
        return f"the dashboard (parent process {parent}) is gone"
    if viewer is not None and idle_s > 0:
        try:
            seen = viewer.stat().st_mtime
        except OSError:
            return None  # not created yet: the dashboard creates it before starting us
        quiet = (time.time() if now is None else now) - seen
        if quiet > idle_s:
            return f"no viewer for {quiet:.0f} s (KVVIZ_IDLE_STOP_S={idle_s:g})"
    return None


def watch(environ: dict | None = None, command: str = "collect") -> threading.Thread | None:
    """Start the watcher when the dashboard set the variables (None otherwise); `command`
    names this process in the line it prints when it stops it."""
    env = environ if environ is not None else os.environ
    parent = int(env[PARENT_ENV]) if env.get(PARENT_ENV, "").isdigit() else None
    viewer = Path(env[VIEWER_ENV]) if env.get(VIEWER_ENV) else None
    if parent is None and viewer is None:
        return None
    idle_s = idle_stop_s(env)
    t = threading.Thread(target=_loop, args=(parent, viewer, idle_s, command), daemon=True,
                         name="kvviz-lifecycle")
    t.start()
    return t


def _loop(parent: int | None, viewer: Path | None, idle_s: float, command: str) -> None:
    global _reason
    while True:
        why = why_stop(parent, viewer, idle_s)
        if why is not None:
            _reason = why
            print(f"kvviz {command}: {why}: stopping", file=sys.stderr, flush=True)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        time.sleep(WATCH_EVERY_S)
