"""Whether a recording that says "running" still has a writer (standard library only, so the
pandas-free kv_reader and RunReader share it).

Every commit of a writer sets run.heartbeat_unix. A writer killed before it could close its
run (SIGKILL, the OOM killer, the KV-event memory guard's last resort, power loss) leaves the
status "running" and a heartbeat that only ages; past stale_after(meta) seconds the run is
shown as "stopped unexpectedly"."""
from __future__ import annotations

import time

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
    if status == "running" and heartbeat is not None and (
            time.time() - heartbeat > stale_after(meta)):
        return STOPPED_UNEXPECTEDLY
    return status
