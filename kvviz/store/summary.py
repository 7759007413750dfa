"""What a recording holds, for `kvviz info` (RunReader.summary): status, lanes with their last
counters, totals. Counted in SQL (index seeks and counts), no blob read."""
from __future__ import annotations

import time
from collections.abc import Callable

from kvviz.core.errors import StoreError
from kvviz.store import checks as check
from kvviz.store import eventcodec as store_events
from kvviz.store.schema import COUNTERS

Query = Callable[[str, tuple], list[tuple]]


def summarize(r, q: Query) -> dict:
    """The summary of RunReader `r` (its header freshly read), querying through `q`. The
    samples of a node recording (`kvviz scrape --out`) are its node_samples."""
    where = str(r.path)

    def count(what: str, value: object) -> int:
        return int(check.number(value or 0, f"{where}: {what}", integer=True, lo=0))

    def counter(last: dict, key: str) -> int | None:
        return None if last.get(key) is None else count(f"table samples column {key!r}",
                                                         last[key])

    lanes = {}
    for lane in r.lanes():
        n = int(q("SELECT COUNT(*) FROM samples WHERE lane = ?", (lane,))[0][0])
        rows = q(f"SELECT {', '.join(COUNTERS)} FROM samples WHERE lane = ? "
                 "ORDER BY sample_id DESC LIMIT 1", (lane,))
        last = dict(zip(COUNTERS, rows[0])) if rows else {}
        maps = q("SELECT COUNT(*), COALESCE(SUM(nbytes), 0) FROM blockmaps WHERE lane = ?",
                 (lane,))[0]
        lanes[lane] = {
            "samples": n, "blockmaps": int(maps[0]),
            "blockmap_bytes": count("table blockmaps column 'nbytes'", maps[1]),
            "failures": {c: count(f"table samples column 'admit_failures_{c}'",
                                  last.get(f"admit_failures_{c}"))
                         for c in ("capacity", "fragmentation", "policy")},
            "preemptions": counter(last, "preemptions"),
            "tokens_generated": counter(last, "tokens_generated"),
        }
    span = _span(q, where, "samples")
    node = _span(q, where, "node_samples") if r.has_table("node_samples") else (0, 0.0)
    n, dur = (span[0] + node[0], span[1] if span[0] else node[1])
    try:
        events = store_events.count(q, r.has_table("event_chunks"))
    except ValueError as exc:
        raise StoreError(f"{where}: damaged events ({exc})") from None
    return {
        "path": where, "status": r.status, "state": r.state,
        "status_message": r.status_message,
        "format_version": r.format_version, "mode": r.meta.get("mode"),
        "device": r.meta.get("device"), "lanes": lanes,
        "duration_s": dur, "samples": n, "node_samples": node[0], "events": events,
        "blockmap_stride": r.blockmap_stride,
        "heartbeat_age_s": None if r.heartbeat is None else time.time() - r.heartbeat,
    }


def _span(q: Query, where: str, table: str) -> tuple[int, float]:
    """(rows, seconds from the first to the last) of a table with a `t` column."""
    lo, hi, n = q(f"SELECT MIN(t), MAX(t), COUNT(*) FROM {table}", ())[0]
    if not n:
        return 0, 0.0
    what = f"{where}: table {table} column 't'"
    return int(n), float(check.number(hi, what)) - float(check.number(lo, what))

