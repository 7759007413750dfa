"""What a recording holds beyond lanes: KV-event streams and node scrapes, counted in SQL
(one aggregate per table, no payload read), for `kvviz info`, `kvviz export` and the pages."""
from __future__ import annotations

from collections.abc import Callable

from kvviz.core.errors import StoreError

Query = Callable[[str, tuple], list[tuple]]


def _int(v: object, what: str) -> int:
    if v is None:
        return 0
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if not isinstance(v, int) or isinstance(v, bool):
        raise StoreError(f"{what} holds {type(v).__name__} values, not counts")
    return v


def kv_events(q: Query, where: str) -> dict:
    """Streams, batches, events, blocks stored/removed, gaps and the time span of the kv_*
    tables ({} when the recording has none)."""
    tables = {r[0] for r in q("SELECT name FROM sqlite_master WHERE type = 'table'", ())}
    if "kv_batches" not in tables:
        return {}
    streams = q("SELECT COUNT(*) FROM kv_streams", ())[0][0] if "kv_streams" in tables else 0
    n, events, stored, removed, bad, replayed, lo, hi = q(
        "SELECT COUNT(*), TOTAL(n_events), TOTAL(n_stored), TOTAL(n_removed), "
        "TOTAL(status != 'ok'), TOTAL(replayed = 1), MIN(t), MAX(t) FROM kv_batches "
        "WHERE typeof(t) IN ('integer', 'real')", ())[0]
    gaps = restarts = 0
    if "kv_gaps" in tables:
        gaps, restarts = q("SELECT TOTAL(kind = 'gap'), TOTAL(kind = 'restart') FROM kv_gaps",
                           ())[0]
    span = float(hi - lo) if n and isinstance(lo, (int, float)) else 0.0
    what = f"{where}: table kv_batches"
    return {"streams": _int(streams, f"{where}: kv_streams"), "batches": _int(n, what),
            "events": _int(events, what), "blocks_stored": _int(stored, what),
            "blocks_removed": _int(removed, what), "undecodable": _int(bad, what),
            "replayed": _int(replayed, what), "gaps": _int(gaps, f"{where}: kv_gaps"),
            "restarts": _int(restarts, f"{where}: kv_gaps"), "span_s": span}


def kv_line(kv: dict) -> str:
    """One sentence of what kv_events counted."""
    extra = [f"{kv[k]} {w}" for k, w in (("undecodable", "undecodable"),
                                         ("replayed", "replayed"),
                                         ("restarts", "publisher restarts")) if kv[k]]
    return (f"KV events: {kv['streams']} streams, {kv['batches']} batches, {kv['events']} "
            f"events ({kv['blocks_stored']} blocks stored, {kv['blocks_removed']} removed), "
            f"{kv['gaps']} gaps" + "".join(f", {e}" for e in extra)
            + f", over {kv['span_s']:.1f} s")
