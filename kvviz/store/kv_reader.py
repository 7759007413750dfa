"""Reading the kv_* tables (docs/FORMAT.md, "KV-event streams") on a read-only connection,
also while a writer appends: streams, gaps, per-second counts, per-stream totals and the raw
batches a model is rebuilt from (kvviz.node.kvevents.rebuild decodes them).

Every call's cost is bounded, whatever the recording's length: aggregates read at most the
newest WINDOW batches (a range of the primary key: NOT INDEXED, so that the planner does not
walk the whole (stream_id, batch_id) index to group by stream), lists take a limit. Rows are
never deleted, so batch ids are dense and MAX(batch_id) - id counts the batches after id. A
value of the wrong type in a row that is read gives one ValueError naming the row.
"""
from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import NamedTuple

from kvviz.store import liveness

WINDOW = 200_000  # batches (and gap rows) an aggregate reads at most: the newest ones
SUMMED = ("batches", "events", "stored_blocks", "removed_blocks", "cleared",
          "replayed_batches", "undecodable")  # per stream, from kv_batches
GAP_COUNTS = ("gaps", "lost_batches", "restarts")  # per stream, from kv_gaps
HUGE_WORK = 1 << 62  # what work_between says past any real count


def connect(path: str | Path) -> sqlite3.Connection:
    """Read-only connection to a recording (a live writer may still append)."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{p}: no such recording")
    return sqlite3.connect(f"file:{p}?mode=ro", uri=True, check_same_thread=False)


def has_kv_events(conn: sqlite3.Connection) -> bool:
    return bool(conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'kv_batches'")
                .fetchall())


class RunState(NamedTuple):
    created: float | None  # run.created_unix
    status: str  # the status to show (liveness.shown_state)
    message: str  # run.status_message: why it stopped, for "error" and "stopped"


def run_state(conn: sqlite3.Connection) -> RunState:
    """The run header as shown: a recording whose writer was killed (status still "running",
    no commit for liveness.stale_after) says "stopped unexpectedly". ValueError when the row
    is missing or its metadata is not a JSON object."""
    row = conn.execute("SELECT created_unix, status, heartbeat_unix, meta, status_message "
                       "FROM run").fetchone()
    if row is None:
        raise ValueError("the run header row is missing: not a complete kvviz recording")
    created = row[0] if isinstance(row[0], (int, float)) else None
    beat = row[2] if isinstance(row[2], (int, float)) else None
    try:
        meta = json.loads(row[3]) if isinstance(row[3], str) else None
    except (ValueError, RecursionError):
        meta = None
    if not isinstance(meta, dict):
        raise ValueError("the run header's meta is not a JSON object: not a complete kvviz "
                         "recording")
    return RunState(created, liveness.shown_state(str(row[1]), beat, meta),
                    row[4] if isinstance(row[4], str) else "")


def streams(conn: sqlite3.Connection) -> list[dict]:
    """Every kv_streams row, summary_json decoded to `summary`. Cost: the streams."""
    cols = ("stream_id", "endpoint", "dp_rank", "topic", "replay", "encoding", "first_t",
            "summary_json")
    out = []
    for r in conn.execute(f"SELECT {', '.join(cols)} FROM kv_streams ORDER BY stream_id"):
        d = dict(zip(cols, r))
        raw = d.pop("summary_json")
        try:
            d["summary"] = json.loads(raw or "null")
        except (TypeError, ValueError, RecursionError):
            raise ValueError(f"damaged recording: kv_streams row {d['stream_id']}: "
                             "summary_json is not JSON of a summary (or nested too deeply)"
                             ) from None
        out.append(d)
    return out


def stream_ranks(conn: sqlite3.Connection) -> dict[int, int]:
    """stream_id -> dp_rank, checked (integers)."""
    rank_of = dict(conn.execute("SELECT stream_id, dp_rank FROM kv_streams").fetchall())
    for sid, rank in rank_of.items():
        if type(sid) is not int or type(rank) is not int:
            raise ValueError(f"damaged recording: kv_streams row {sid!r}: dp_rank {rank!r} "
                             "is not an integer")
    return rank_of


def gaps(conn: sqlite3.Connection, limit: int | None = None) -> list[dict]:
    """The kv_gaps rows in order (the first `limit` of them)."""
    cols = ("stream_id", "t", "kind", "first_seq", "last_seq", "filled")
    return [dict(zip(cols, r)) for r in conn.execute(
        f"SELECT {', '.join(cols)} FROM kv_gaps ORDER BY gap_id LIMIT ?",
        (-1 if limit is None else int(limit),))]


def last_batch(conn: sqlite3.Connection) -> int:
    """The newest batch id (0 without batches). One seek on the primary key."""
    row = conn.execute("SELECT MAX(batch_id) FROM kv_batches").fetchone()
    return row[0] if type(row[0]) is int else 0


def batches_after(conn: sqlite3.Connection, batch_id: int) -> int:
    """How many batches follow `batch_id` (ids are dense). O(1)."""
    return max(0, last_batch(conn) - int(batch_id))


def _floor(conn: sqlite3.Connection, table: str, key: str, window: int | None) -> int:
    """The id after which the newest `window` (None: WINDOW) rows of `table` start (one
    seek)."""
    window = WINDOW if window is None else window
    top = conn.execute(f"SELECT MAX({key}) FROM {table}").fetchone()[0]
    return max(0, top - int(window)) if type(top) is int else 0


def timeline(conn: sqlite3.Connection, window: int | None = None) -> list[tuple]:
    """(stream_id, whole second, stored, removed) from the counts of the newest `window` (None:
    WINDOW) batches, in (stream, second) order. Cost: O(window)."""
    return conn.execute("SELECT stream_id, CAST(t AS INTEGER) AS s, SUM(n_stored), "
                        "SUM(n_removed) FROM kv_batches NOT INDEXED WHERE batch_id > ? GROUP BY "
                        "stream_id, s ORDER BY stream_id, s",
                        (_floor(conn, "kv_batches", "batch_id", window),)).fetchall()


def timeline_is_partial(conn: sqlite3.Connection, window: int | None = None) -> bool:
    """Whether timeline() left older batches out. Two seeks."""
    first = conn.execute("SELECT MIN(batch_id) FROM kv_batches").fetchone()[0]
    return type(first) is int and first <= _floor(conn, "kv_batches", "batch_id", window)


def stream_counts(conn: sqlite3.Connection, window: int | None = None) -> dict[int, dict]:
    """Per stream: SUMMED and GAP_COUNTS, counted from the rows (a live recording has no
    summary yet) when the recording holds at most `window` batches and gap rows. Past that,
    a finished stream's own summary (written by its subscriber at the end) gives the totals,
    and the others are counted over the newest `window` rows, with "partial": True. Cost:
    O(window) whatever the recording's length."""
    floor = _floor(conn, "kv_batches", "batch_id", window)
    first = conn.execute("SELECT MIN(batch_id) FROM kv_batches").fetchone()[0]
    out: dict[int, dict] = {}
    for sid, *sums in conn.execute(
            "SELECT stream_id, SUM(status = 'ok'), SUM(n_events), SUM(n_stored), "
            "SUM(n_removed), SUM(n_cleared), SUM(replayed), SUM(status = 'undecodable') "
            "FROM kv_batches NOT INDEXED WHERE batch_id > ? GROUP BY stream_id", (floor,)):
        out[sid] = dict(zip(SUMMED, sums))
    partial = type(first) is int and first <= floor
    partial = _gap_counts(conn, out, window) or partial
    if partial:
        for s in streams(conn):
            own = s["summary"]
            if isinstance(own, dict) and all(type(own.get(k)) is int
                                             for k in SUMMED + GAP_COUNTS):
                out[s["stream_id"]] = {k: own[k] for k in SUMMED + GAP_COUNTS}
            else:
                out.setdefault(s["stream_id"], {})["partial"] = True
    return out


def _gap_counts(conn: sqlite3.Connection, out: dict[int, dict], window: int | None) -> bool:
    """gaps / lost_batches / restarts of the newest `window` gap rows into `out`; whether
    older rows were left out."""
    floor = _floor(conn, "kv_gaps", "gap_id", window)
    first = conn.execute("SELECT MIN(gap_id) FROM kv_gaps").fetchone()[0]
    # TOTAL: a float sum, exact below 2^53 lost batches and never an int64 overflow (a
    # gap-heavy stream's seq jumps add up past 2^63)
    lost_sql = "MAX(0, last_seq - first_seq + 1) * (filled = 0)"
    rows = conn.execute(
        f"SELECT stream_id, kind, COUNT(*), TOTAL({lost_sql}), SUM(typeof(first_seq) != "
        "'integer' OR typeof(last_seq) != 'integer' OR typeof(filled) != 'integer') "
        "FROM kv_gaps WHERE gap_id > ? GROUP BY stream_id, kind", (floor,)).fetchall()
    for sid, kind, n, lost, bad in rows:
        if bad:
            raise ValueError(f"damaged recording: kv_gaps of stream {sid!r}: first_seq, "
                             "last_seq and filled must be integers")
        d = out.setdefault(sid, {})
        if kind == "gap":
            d["gaps"], d["lost_batches"] = n, int(lost)
        else:
            d["restarts"] = n
    return type(first) is int and first <= floor


def ok_batches(conn: sqlite3.Connection, after_batch: int = 0,
               limit: int | None = None) -> list[tuple]:
    """(batch_id, stream_id, seq, t, payload) of the decodable batches with batch_id >
    after_batch, in order, at most `limit` of them, each row checked."""
    rows = conn.execute("SELECT batch_id, stream_id, seq, t, payload FROM kv_batches WHERE "
                        "batch_id > ? AND status = 'ok' ORDER BY batch_id LIMIT ?",
                        (after_batch, -1 if limit is None else limit)).fetchall()
    for row in rows:
        _check_row(*row)
    return rows


def work_total(counts: dict[int, dict]) -> tuple[int, bool]:
    """(block stores, removals and clears the recording holds, whether that is a lower
    bound) from what stream_counts returned."""
    total = sum(int(c.get(k) or 0) for c in counts.values()
                for k in ("stored_blocks", "removed_blocks", "cleared"))
    return total, any(c.get("partial") for c in counts.values())


def work_between(conn: sqlite3.Connection, after_batch: int, upto_batch: int) -> int:
    """Block stores, removals and clears of the decodable batches in (after, upto]: what
    rebuilding them costs. Cost: the batches in the range."""
    v = conn.execute("SELECT TOTAL(n_stored + n_removed + n_cleared) FROM kv_batches "
                     "WHERE batch_id > ? AND batch_id <= ? AND status = 'ok'",
                     (after_batch, upto_batch)).fetchone()[0]
    return int(v) if abs(v) < HUGE_WORK else HUGE_WORK  # hand-edited counts: inf, 1e308


def batch_t(conn: sqlite3.Connection, batch_id: int) -> float | None:
    """The receive time of one batch (None when absent or not a number). One seek."""
    row = conn.execute("SELECT t FROM kv_batches WHERE batch_id = ?", (batch_id,)).fetchone()
    return row[0] if row is not None and isinstance(row[0], (int, float)) else None


def _check_row(bid, sid, seq, t, payload) -> None:
    """One clear error for a hand-edited kv_batches row (values of the wrong type)."""
    for name, v, ok in (("stream_id", sid, type(sid) is int), ("seq", seq, type(seq) is int),
                        ("t", t, type(t) in (int, float) and t == t and abs(t) < 1e15),
                        ("payload", payload, isinstance(payload, bytes))):
        if not ok:
            want = "bytes" if name == "payload" else "a number"
            raise ValueError(f"damaged recording: kv_batches row {bid}: {name} "
                             f"{str(v)[:40]!r} is not {want}")
