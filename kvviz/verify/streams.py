"""What a node recording (node_samples) and the KV-event tables (kv_streams, kv_batches,
kv_gaps) hold, and the rules of docs/FORMAT.md they must follow.

Counted and checked in SQL (a pass over each table, payloads never loaded at once), so the
cost is bounded by the file whatever it declares. msgpack payloads are not decoded here (the
verifier imports the standard library and numpy only): their counts are reported as stored.
"""
from __future__ import annotations

import json
import sqlite3
import zlib

from kvviz.verify import decode

NODE_STATUSES = ("ok", "unreachable", "timeout", "garbled")
RAW_CAP = 64 << 20  # bytes one scrape's series may inflate to
NUM = "typeof({c}) IN ('integer', 'real')"
INT = "typeof({c}) = 'integer'"
TEXT = "typeof({c}) = 'text'"

# table -> (rule in SQL that every row must satisfy, in words)
KV_RULES = {
    "kv_streams": [
        (" AND ".join([INT.format(c="stream_id"), TEXT.format(c="endpoint"),
                       INT.format(c="dp_rank"), TEXT.format(c="topic")]),
         "stream_id, dp_rank integers; endpoint, topic text"),
        ("encoding IS NULL OR encoding IN ('map', 'array', 'mixed')",
         "encoding map, array, mixed or NULL"),
        ("summary_json IS NULL OR " + TEXT.format(c="summary_json"), "summary_json text"),
    ],
    "kv_batches": [
        (" AND ".join([INT.format(c=c) for c in ("stream_id", "seq", "n_events", "n_stored",
                                                  "n_removed", "n_cleared", "n_unknown",
                                                  "replayed")] + [NUM.format(c="t")]),
         "stream_id, seq and the counts integers, t a number"),
        ("status IN ('ok', 'undecodable')", "status ok or undecodable"),
        ("typeof(payload) = 'blob'", "payload a blob"),
        ("n_events >= 0 AND n_stored >= 0 AND n_removed >= 0 AND n_cleared >= 0 "
         "AND n_unknown >= 0", "counts >= 0"),
        ("status = 'ok' OR (n_events = 0 AND n_stored = 0 AND n_removed = 0)",
         "an undecodable batch counts 0 events"),
        ("replayed IN (0, 1)", "replayed 0 or 1"),
        ("stream_id IN (SELECT stream_id FROM kv_streams)", "stream_id is a kv_streams row"),
    ],
    "kv_gaps": [
        (" AND ".join([INT.format(c=c) for c in ("stream_id", "first_seq", "last_seq",
                                                  "filled")] + [NUM.format(c="t")]),
         "stream_id, first_seq, last_seq, filled integers, t a number"),
        ("kind IN ('gap', 'restart')", "kind gap or restart"),
        ("filled IN (0, 1)", "filled 0 or 1"),
        ("stream_id IN (SELECT stream_id FROM kv_streams)", "stream_id is a kv_streams row"),
    ],
}
KEYS = {"kv_streams": "stream_id", "kv_batches": "batch_id", "kv_gaps": "gap_id"}


def _rules(db: sqlite3.Connection, rep, table: str, rules: list) -> None:
    for rule, words in rules:
        rep.checks += 1
        n, first = db.execute(f"SELECT COUNT(*), MIN({KEYS.get(table, 'rowid')}) FROM {table} "
                              f"WHERE NOT COALESCE(({rule}), 0)").fetchone()
        if n:
            rep.bad(f"{table} row {first}", f"breaks '{words}' ({n} rows do)")


def _int_total(c: str) -> str:
    return f"TOTAL(CASE WHEN {INT.format(c=c)} THEN {c} END)"


def kv_events(db: sqlite3.Connection, rep, have: set[str]) -> dict:
    """The KV-event tables' contents (empty when the file has none), checked."""
    if "kv_batches" not in have:
        return {}
    missing = {"kv_streams", "kv_gaps"} - have
    if missing:
        rep.bad("kv tables", f"kv_batches without {', '.join(sorted(missing))}")
        return {}
    for table, rules in KV_RULES.items():
        _rules(db, rep, table, rules)
    streams = db.execute("SELECT COUNT(*) FROM kv_streams").fetchone()[0]
    # the counts summed where they are integers (a row with another type, e.g. a REAL
    # -9e999, broke a rule above; its value would make the total infinite)
    n, events, stored, removed, ok, replayed, lo, hi = db.execute(
        f"SELECT COUNT(*), {_int_total('n_events')}, {_int_total('n_stored')}, "
        f"{_int_total('n_removed')}, TOTAL(status = 'ok'), TOTAL(replayed = 1), MIN(t), "
        f"MAX(t) FROM kv_batches WHERE {NUM.format(c='t')}").fetchone()
    gaps, restarts, filled = db.execute(
        "SELECT TOTAL(kind = 'gap'), TOTAL(kind = 'restart'), TOTAL(filled = 1 AND "
        "kind = 'gap') FROM kv_gaps").fetchone()
    return {"kv_streams": int(streams), "kv_batches": int(n), "kv_events": int(events),
            "kv_blocks_stored": int(stored), "kv_blocks_removed": int(removed),
            "kv_batches_undecodable": int(n - ok), "kv_batches_replayed": int(replayed),
            "kv_gaps": int(gaps), "kv_gaps_filled": int(filled), "kv_restarts": int(restarts),
            "kv_span_s": float(hi - lo) if n else 0.0}


def node_samples(db: sqlite3.Connection, rep, have: set[str]) -> dict:
    """A node recording's scrapes, checked: t and time numbers in order, a documented status,
    kv_usage in 0..1, every raw_zlib a zlib JSON object (inflated one at a time, capped)."""
    empty = {"node_samples": 0, "node_samples_ok": 0, "node_span_s": 0.0}
    if "node_samples" not in have:
        return empty
    cols = {r[1] for r in db.execute("PRAGMA table_info(node_samples)")}
    if not {"t", "status"} <= cols:
        rep.bad("node_samples", "no t or status column")
        return empty
    rules = [(NUM.format(c="t"), "t a number"),
             ("status IN " + str(NODE_STATUSES), "status one of " + ", ".join(NODE_STATUSES))]
    if "kv_usage" in cols:
        rules.append(("kv_usage IS NULL OR (" + NUM.format(c="kv_usage")
                      + " AND kv_usage BETWEEN 0 AND 1)", "kv_usage in 0..1"))
    _rules(db, rep, "node_samples", rules)
    n, ok, lo, hi = db.execute(f"SELECT COUNT(*), TOTAL(status = 'ok'), MIN(t), MAX(t) FROM "
                               f"node_samples WHERE {NUM.format(c='t')}").fetchone()
    rep.checks += 1
    back = db.execute(f"SELECT COUNT(*) FROM (SELECT t, LAG(t) OVER (ORDER BY rowid) AS p "
                      f"FROM node_samples WHERE {NUM.format(c='t')}) WHERE t < p").fetchone()[0]
    if back:
        rep.bad("node_samples", f"t goes back {back} times in row order")
    if "raw_zlib" in cols:
        for rowid, blob, size in db.execute(  # a blob read only when its length fits
                "SELECT rowid, CASE WHEN length(raw_zlib) <= ? THEN raw_zlib END, "
                "length(raw_zlib) FROM node_samples WHERE raw_zlib IS NOT NULL",
                (decode.stored_cap(RAW_CAP),)):
            rep.checks += 1
            why = _series(blob) if blob is not None else (
                f"is stored in {size} bytes, more than the {decode.stored_cap(RAW_CAP)} a "
                "blob inflating to at most 64 MiB takes")
            if why:
                rep.bad(f"node_samples row {rowid}", f"raw_zlib {why}")
    return {"node_samples": int(n), "node_samples_ok": int(ok),
            "node_span_s": float(hi - lo) if n else 0.0}


def _series(blob: object) -> str | None:
    if not isinstance(blob, bytes):
        return f"is {type(blob).__name__}, not a blob"
    d = zlib.decompressobj()
    try:
        head = d.decompress(blob, 4096)  # an object's first bytes: "{", after any blanks
        if head.strip(b" \t\r\n")[:1] not in (b"{", b""):
            return "is not a JSON object"
        raw = head + d.decompress(d.unconsumed_tail, RAW_CAP + 1 - len(head))
    except zlib.error as exc:
        return f"is not zlib data ({exc})"
    if len(raw) > RAW_CAP or not d.eof:
        return "inflates past 64 MiB" if len(raw) > RAW_CAP else "is cut short"
    try:
        obj = json.loads(raw)
    except (ValueError, RecursionError):
        return "is not JSON"
    return None if isinstance(obj, dict) else "is not a JSON object"
