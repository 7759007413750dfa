"""Events in a recording: rare kinds as rows, the per-request bulk as compressed columns.

`admitted` and `finished` happen once per request, `partial` once per request and step that
leaves it short of its known tokens (a prefill chunk, a decode the token budget skipped): a
busy unpaced run makes ~40,000 of them a second, too many to insert as SQLite rows without
taking CPU from the engine next to the writer (docs/BENCHMARKS.md, decision log). They are
stored as `event_chunks` (one row per sample, lane and kind, zlib-compressed numpy columns);
the kinds a user queries one by one (admit_failed, preempted, rejected, evicted) stay rows
of `events`. Every event has a run-wide `event_id` in engine order, in either table, so a
reader merges them back into one ordered stream (event_frames.read, the reader's side).
Layout: docs/FORMAT.md. Standard library and numpy only: the writer process imports it.
"""
from __future__ import annotations

import sqlite3
import zlib
from collections.abc import Callable

import numpy as np

from kvviz.store.schema import EVENT_COLS as ROW_COLS  # `events` columns after event_id

CHUNK_KINDS = ("admitted", "finished", "partial")
CHUNK_ENCODING = "cols-zlib-1"
# Columns of a chunk, in blob order; every one 8 bytes little-endian per event.
CHUNK_COLS = (("event_id", "<i8"), ("t", "<f8"), ("step", "<i8"), ("seq_id", "<i8"),
              ("need_tokens", "<i8"), ("free_tokens", "<i8"))
CHUNK_SCHEMA = """
CREATE TABLE event_chunks (chunk_id INTEGER PRIMARY KEY, lane TEXT NOT NULL,
  kind TEXT NOT NULL, n INTEGER NOT NULL, t_first REAL NOT NULL, t_last REAL NOT NULL,
  id_first INTEGER NOT NULL, id_last INTEGER NOT NULL, encoding TEXT NOT NULL,
  data BLOB NOT NULL);
CREATE INDEX event_chunks_t ON event_chunks (t_last);
"""


def next_event_id(conn: sqlite3.Connection) -> int:
    ids = [r[0] for r in conn.execute("SELECT MAX(event_id) FROM events")]
    if has_chunks(conn):
        ids += [r[0] for r in conn.execute("SELECT MAX(id_last) FROM event_chunks")]
    return 1 + max([int(i) for i in ids if i is not None], default=0)


def has_chunks(conn: sqlite3.Connection) -> bool:
    return bool(conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'event_chunks'")
                .fetchall())


def write(conn: sqlite3.Connection, ev, first_id: int) -> int:
    """Insert `ev` (kvviz.engine.eventlog.EventColumns) with event ids from `first_id`;
    returns the next free id."""
    # imported here: the engine package loads numba (~60 MB), which readers never need
    from kvviz.engine.eventlog import KIND_CODE, EventColumns

    n = len(ev)
    if not n:
        return first_id
    ids = np.arange(first_id, first_id + n, dtype=np.int64)
    bulk = np.isin(ev["kind"], np.array([KIND_CODE[k] for k in CHUNK_KINDS], np.int8))
    if not bulk.all():
        rare = ~bulk
        rows = EventColumns({f: a[rare] for f, a in ev.cols.items()}, ev.lanes).rows()
        conn.executemany(f"INSERT INTO events (event_id, {', '.join(ROW_COLS)}) VALUES "
                         f"(?, {', '.join('?' * len(ROW_COLS))})",
                         [(i, *r) for i, r in zip(ids[rare].tolist(), rows)])
    if bulk.any():
        chunks = []
        for kind in CHUNK_KINDS:
            of_kind = bulk & (ev["kind"] == KIND_CODE[kind])
            for code in np.unique(ev["lane"][of_kind]).tolist():
                sel = of_kind & (ev["lane"] == code)
                cols = {"event_id": ids[sel], "t": ev["time_s"][sel], "step": ev["step"][sel],
                        "seq_id": ev["seq_id"][sel], "need_tokens": ev["need_tokens"][sel],
                        "free_tokens": ev["free_tokens"][sel]}
                blob = zlib.compress(b"".join(np.ascontiguousarray(cols[c], d).tobytes()
                                              for c, d in CHUNK_COLS), 1)
                t, i = cols["t"], cols["event_id"]
                chunks.append((ev.lanes[code], kind, len(i), float(t[0]), float(t[-1]),
                               int(i[0]), int(i[-1]), CHUNK_ENCODING, blob))
        conn.executemany("INSERT INTO event_chunks (lane, kind, n, t_first, t_last, id_first, "
                         "id_last, encoding, data) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", chunks)
    return first_id + n


def decode_chunk(n: int, encoding: str, data: bytes) -> dict[str, np.ndarray]:
    """One chunk's columns (CHUNK_COLS); ValueError names what is wrong."""
    if encoding != CHUNK_ENCODING:
        raise ValueError(f"unknown event chunk encoding {encoding!r:.60}")
    if not isinstance(n, int) or n < 0:
        raise ValueError(f"event chunk count must be an integer >= 0, got {n!r:.60}")
    if not isinstance(data, bytes):
        raise ValueError(f"event chunk data is {type(data).__name__}, not a blob")
    d = zlib.decompressobj()
    try:  # at most one byte more than n events take: a larger chunk is damage
        raw = d.decompress(data, 8 * n * len(CHUNK_COLS) + 1)
    except zlib.error as exc:
        raise ValueError(f"event chunk is not zlib data ({exc})") from None
    if not d.eof and len(raw) <= 8 * n * len(CHUNK_COLS):
        raise ValueError("event chunk data is truncated")
    if len(raw) != 8 * n * len(CHUNK_COLS):
        raise ValueError(f"event chunk holds {len(raw)} bytes, expected "
                         f"{8 * n * len(CHUNK_COLS)} for {n} events")
    return {c: np.frombuffer(raw, d, n, 8 * n * k) for k, (c, d) in enumerate(CHUNK_COLS)}


def count(query: Callable[[str, tuple], list[tuple]], chunks: bool) -> int:
    n = int(query("SELECT COUNT(*) FROM events", ())[0][0])
    if chunks:
        if query("SELECT 1 FROM event_chunks WHERE typeof(n) != 'integer' OR n < 0 LIMIT 1",
                 ()):
            raise ValueError("event_chunks column 'n' holds a value that is not a count")
        n += int(query("SELECT COALESCE(SUM(n), 0) FROM event_chunks", ())[0][0])
    return n
