"""The kv_* tables of a recording: KV-event streams as received (docs/FORMAT.md,
"KV-event streams").

Every message is kept as its raw payload (one row per batch, decoded or not), so a recording
is lossless and a reader rebuilds the prefix cache by decoding the payloads again; counts per
batch are columns so that timelines need no decoding. Gaps and restarts are rows of kv_gaps.
The writer side imports the standard library only (it runs on a RunWriter's connection);
the reader side decodes with msgspec (kvviz.node.kvevents.decode).
"""
from __future__ import annotations

import json
import sqlite3
from pathlib import Path

SCHEMA = """
CREATE TABLE IF NOT EXISTS kv_streams (stream_id INTEGER PRIMARY KEY, endpoint TEXT NOT NULL,
  dp_rank INTEGER NOT NULL, topic TEXT NOT NULL, replay TEXT, encoding TEXT,
  first_t REAL, summary_json TEXT);
CREATE TABLE IF NOT EXISTS kv_batches (batch_id INTEGER PRIMARY KEY,
  stream_id INTEGER NOT NULL, seq INTEGER NOT NULL, t REAL NOT NULL, ts REAL,
  dp_rank INTEGER, n_events INTEGER NOT NULL, n_stored INTEGER NOT NULL,
  n_removed INTEGER NOT NULL, n_cleared INTEGER NOT NULL, n_unknown INTEGER NOT NULL,
  replayed INTEGER NOT NULL, status TEXT NOT NULL, topic BLOB, payload BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS kv_batches_stream ON kv_batches (stream_id, batch_id);
CREATE TABLE IF NOT EXISTS kv_gaps (gap_id INTEGER PRIMARY KEY, stream_id INTEGER NOT NULL,
  t REAL NOT NULL, kind TEXT NOT NULL, first_seq INTEGER NOT NULL, last_seq INTEGER NOT NULL,
  filled INTEGER NOT NULL);
"""
BATCH_COLS = ("stream_id", "seq", "t", "ts", "dp_rank", "n_events", "n_stored", "n_removed",
              "n_cleared", "n_unknown", "replayed", "status", "topic", "payload")
STATUSES = ("ok", "undecodable")
GAP_KINDS = ("gap", "restart")


FLUSH_BYTES = 32 << 20  # buffered payload bytes that make add_batch flush by itself


class KvEventWriter:
    """Buffers batch rows and writes them with one executemany per flush (the caller commits
    through its RunWriter); at most FLUSH_BYTES of payloads wait. Not thread-safe."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        _create(conn)
        self._rows: list[tuple] = []
        self._bytes = 0

    def add_stream(self, endpoint: str, dp_rank: int, topic: str, replay: str | None) -> int:
        cur = self.conn.execute("INSERT INTO kv_streams (endpoint, dp_rank, topic, replay) "
                                "VALUES (?, ?, ?, ?)", (endpoint, dp_rank, topic, replay))
        return int(cur.lastrowid)  # type: ignore[arg-type]

    def add_batch(self, row: tuple) -> None:
        """row: values in BATCH_COLS order."""
        self._rows.append(row)
        self._bytes += len(row[-1]) + len(row[-2] or b"")
        if self._bytes > FLUSH_BYTES:
            self.flush()

    def add_gap(self, stream_id: int, t: float, kind: str, first: int, last: int,
                filled: bool) -> None:
        self.conn.execute("INSERT INTO kv_gaps (stream_id, t, kind, first_seq, last_seq, "
                          "filled) VALUES (?, ?, ?, ?, ?, ?)",
                          (stream_id, t, kind, first, last, int(filled)))

    def set_stream(self, stream_id: int, encoding: str | None, first_t: float | None,
                   summary: dict | None) -> None:
        self.conn.execute("UPDATE kv_streams SET encoding = ?, first_t = ?, summary_json = ? "
                          "WHERE stream_id = ?", (encoding, first_t, None if summary is None
                                                  else json.dumps(summary), stream_id))

    def flush(self) -> None:
        if self._rows:
            self.conn.executemany(f"INSERT INTO kv_batches ({', '.join(BATCH_COLS)}) VALUES "
                                  f"({', '.join('?' * len(BATCH_COLS))})", self._rows)
            self._rows.clear()
        self._bytes = 0


def add_own_batches(conn: sqlite3.Connection, t: float, rows: list[tuple]) -> None:
    """A collector's own published batches (kvviz.node.kvevents.engine_source rows: lane,
    endpoint, dp_rank, encoding, seq, ts, n_events, n_stored, n_removed, n_cleared, payload)
    received at run time t -> kv_* rows. A stream per (endpoint, dp rank), created on its first
    batch with summary_json {"lane": its lane}. The caller commits."""
    kv = KvEventWriter(conn)
    ids: dict[tuple, int] = {}
    for lane, endpoint, rank, encoding, seq, ts, ne, ns, nr, nc, payload in rows:
        sid = ids.get((endpoint, rank))
        if sid is None:
            got = conn.execute("SELECT stream_id FROM kv_streams WHERE endpoint = ? AND "
                               "dp_rank = ?", (endpoint, rank)).fetchone()
            if got is None:
                sid = kv.add_stream(endpoint, rank, "", None)
                kv.set_stream(sid, encoding, t, {"lane": lane})
            else:
                sid = int(got[0])
            ids[(endpoint, rank)] = sid
        kv.add_batch((sid, seq, t, ts, rank, ne, ns, nr, nc, 0, 0, "ok", b"", payload))
    kv.flush()


def _create(conn: sqlite3.Connection) -> None:
    for stmt in SCHEMA.split(";"):
        if stmt.strip():
            conn.execute(stmt)


# ---- reader ---------------------------------------------------------------------------------
def has_kv_events(conn: sqlite3.Connection) -> bool:
    return bool(conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'kv_batches'")
                .fetchall())


def connect(path: str | Path) -> sqlite3.Connection:
    """Read-only connection to a recording (a live writer may still append)."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{p}: no such recording")
    return sqlite3.connect(f"file:{p}?mode=ro", uri=True, check_same_thread=False)


def streams(conn: sqlite3.Connection) -> list[dict]:
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


def gaps(conn: sqlite3.Connection, limit: int | None = None) -> list[dict]:
    """The kv_gaps rows in order (the first `limit` of them)."""
    cols = ("stream_id", "t", "kind", "first_seq", "last_seq", "filled")
    return [dict(zip(cols, r)) for r in conn.execute(
        f"SELECT {', '.join(cols)} FROM kv_gaps ORDER BY gap_id LIMIT ?",
        (-1 if limit is None else int(limit),))]


def timeline(conn: sqlite3.Connection) -> list[tuple]:
    """(stream_id, whole second, stored, removed) from the batch counts."""
    return conn.execute("SELECT stream_id, CAST(t AS INTEGER) AS s, SUM(n_stored), "
                        "SUM(n_removed) FROM kv_batches GROUP BY stream_id, s "
                        "ORDER BY stream_id, s").fetchall()


def load_model(conn: sqlite3.Connection, after_batch: int = 0, model=None,
               limit: int | None = None):
    """Rebuild (or continue) the CacheModel from decodable batches with batch_id >
    after_batch (at most `limit` of them); returns (model, last batch id)."""
    from kvviz.node.kvevents.decode import Undecodable, decode
    from kvviz.node.kvevents.model import CacheModel

    model = model if model is not None else CacheModel()
    rank_of = dict(conn.execute("SELECT stream_id, dp_rank FROM kv_streams").fetchall())
    for sid, rank in rank_of.items():
        if type(sid) is not int or type(rank) is not int:
            raise ValueError(f"damaged recording: kv_streams row {sid!r}: dp_rank {rank!r} "
                             "is not an integer")
    last = after_batch
    seqs = model._last_seq  # per stream, to see restarts as the subscriber did
    for bid, sid, seq, t, payload in conn.execute(
            "SELECT batch_id, stream_id, seq, t, payload FROM kv_batches WHERE batch_id > ? AND "
            "status = 'ok' ORDER BY batch_id LIMIT ?", (after_batch, -1 if limit is None
                                                         else limit)):
        _check_row(bid, sid, seq, t, payload)
        last = bid
        if sid in seqs and seq <= seqs[sid]:  # a publisher restart: its cache is empty
            model.restart(sid)
        seqs[sid] = seq
        try:
            b = decode(payload)
        except Undecodable:
            continue
        model.apply(sid, rank_of.get(sid, 0) if b.dp_rank is None else b.dp_rank, b.events, t)
    return model, last


def _check_row(bid, sid, seq, t, payload) -> None:
    """One clear error for a hand-edited kv_batches row (values of the wrong type)."""
    for name, v, ok in (("stream_id", sid, type(sid) is int), ("seq", seq, type(seq) is int),
                        ("t", t, type(t) in (int, float) and t == t and abs(t) < 1e15),
                        ("payload", payload, isinstance(payload, bytes))):
        if not ok:
            want = "bytes" if name == "payload" else "a number"
            raise ValueError(f"damaged recording: kv_batches row {bid}: {name} "
                             f"{str(v)[:40]!r} is not {want}")


def stream_counts(conn: sqlite3.Connection) -> dict[int, dict]:
    """Per stream, counted from the rows so far (a live recording has no summary yet)."""
    out: dict[int, dict] = {}
    for sid, ok, ev, ns, nr, nc, rep, bad in conn.execute(
            "SELECT stream_id, SUM(status = 'ok'), SUM(n_events), SUM(n_stored), "
            "SUM(n_removed), SUM(n_cleared), SUM(replayed), SUM(status = 'undecodable') "
            "FROM kv_batches GROUP BY stream_id"):
        out[sid] = {"batches": ok, "events": ev, "stored_blocks": ns, "removed_blocks": nr,
                    "cleared": nc, "replayed_batches": rep, "undecodable": bad}
    lost_of: dict = {}  # in Python ints: a gap-heavy stream's sum overflows SQLite's int64
    for sid, kind, first, last, filled in conn.execute(
            "SELECT stream_id, kind, first_seq, last_seq, filled FROM kv_gaps"):
        if not all(type(v) is int for v in (first, last, filled)):
            raise ValueError(f"damaged recording: kv_gaps of stream {sid!r}: first_seq, "
                             "last_seq and filled must be integers")
        key = (sid, kind)
        n, lost = lost_of.get(key, (0, 0))
        lost_of[key] = (n + 1, lost + (0 if filled else max(0, last - first + 1)))
    for (sid, kind), (n, lost) in lost_of.items():
        d = out.setdefault(sid, {})
        if kind == "gap":
            d["gaps"], d["lost_batches"] = n, lost
        else:
            d["restarts"] = n
    return out
