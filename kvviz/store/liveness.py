"""Whether a recording that says "running" still has a writer (standard library only, so the
pandas-free kv_reader and RunReader share it).

Every commit of a writer sets run.heartbeat_unix. A writer killed before it could close its
run (SIGKILL, the OOM killer, the KV-event memory guard's last resort, power loss) leaves the
status "running" and a heartbeat that only ages; past stale_after(meta) seconds the run is
shown as "stopped unexpectedly". A heartbeat further in the future than that (a damaged file,
a clock set wrong) proves nothing either: it counts as stale too, and is shown as "in the
future", never as a negative age.

`live_writer` says why a recording still has a writer (a fresh heartbeat on a running run, or
SQLite's write lock held): `kvviz collect --overwrite` refuses such a file."""
from __future__ import annotations

import json
import math
import os
import sqlite3
import time
from pathlib import Path

STALE_S = 30.0  # the least time without a commit before a "running" run counts as killed
STOPPED_UNEXPECTEDLY = "stopped unexpectedly"


def stale_after(meta: dict, least: float = STALE_S) -> float:
    """`least` seconds, or 3 sampling periods of a slower collector or scrape (from meta):
    how long a running recording may go without a commit before its writer counts as killed."""
    periods = []
    collector, scrape = meta.get("collector"), meta.get("scrape")
    hz = collector.get("hz") if isinstance(collector, dict) else None
    if isinstance(hz, (int, float)) and hz > 0:
        periods.append(1.0 / hz)
    every = scrape.get("interval_s") if isinstance(scrape, dict) else None
    if isinstance(every, (int, float)) and every > 0:
        periods.append(float(every))
    return max([least, *(3 * p for p in periods)])


def shown_state(status: str, heartbeat: float | None, meta: dict) -> str:
    """The status to show: STOPPED_UNEXPECTEDLY for a run that says "running" but has not
    committed for stale_after(meta) seconds, else the status it says."""
    if status == "running" and heartbeat is not None and not fresh(heartbeat, meta):
        return STOPPED_UNEXPECTEDLY
    return status


def fresh(heartbeat: float, meta: dict, now: float | None = None) -> bool:
    """A heartbeat within stale_after(meta) seconds of now, before or after it (a writer's
    clock a little ahead); not a finite number, or further off either way: not fresh."""
    if isinstance(heartbeat, bool) or not isinstance(heartbeat, (int, float)):
        return False
    age = (time.time() if now is None else now) - heartbeat
    return math.isfinite(age) and abs(age) <= stale_after(meta)


def age_text(heartbeat: float | None, now: float | None = None) -> str:
    """"12.3 s ago", "in the future (by 5.0 s)", or "unknown" for no finite heartbeat."""
    if isinstance(heartbeat, bool) or not isinstance(heartbeat, (int, float)):
        return "unknown"
    age = (time.time() if now is None else now) - heartbeat
    if not math.isfinite(age):
        return "unknown"
    if age < -1.0:
        return f"in the future (by {-age:.3g} s)"
    return f"{max(0.0, age):.1f} s ago"


def live_writer(path: str | os.PathLike) -> str | None:
    """Why the recording at `path` still has a writer, or None: its run says "running" with a
    fresh heartbeat, or another connection holds SQLite's write lock. A file SQLite cannot
    read has no writer kvviz knows of (None)."""
    try:
        db = sqlite3.connect(f"{Path(path).resolve().as_uri()}?mode=rw", uri=True, timeout=0,
                             isolation_level=None)
    except (sqlite3.Error, OSError, ValueError):
        return None
    try:
        try:
            row = db.execute("SELECT status, heartbeat_unix, meta FROM run WHERE id = 1")
            row = row.fetchone()
        except sqlite3.Error:
            row = None
        if row is not None and row[0] == "running":
            try:
                meta = json.loads(row[2]) if isinstance(row[2], str) else {}
            except (ValueError, RecursionError):
                meta = {}
            meta = meta if isinstance(meta, dict) else {}
            if fresh(row[1], meta):
                return f"its writer is still running (status running, last commit " \
                       f"{age_text(row[1])})"
        try:
            db.execute("BEGIN IMMEDIATE")
            db.execute("ROLLBACK")
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc) or "busy" in str(exc):
                return "another process holds its write lock (a writer is still running)"
        except sqlite3.Error:
            pass
        return None
    finally:
        db.close()
