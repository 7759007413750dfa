"""Writing the kv_* tables (docs/FORMAT.md, "KV-event streams"): KvEventWriter buffers the
batches a subscriber receives; add_own_batches files a collector's own published batches.

Both write on a RunWriter's connection (RunWriter.kv_events, RunWriter.add_own_kv_batches) and
leave committing to it. Standard library only (it runs in the writer process).
"""
from __future__ import annotations

import json
import sqlite3

from kvviz.store.schema import KV_BATCH_COLS, KV_SCHEMA

FLUSH_BYTES = 32 << 20  # buffered payload bytes that make add_batch flush by itself


def create_tables(conn: sqlite3.Connection) -> None:
    """The kv_* tables and their index, where they are missing."""
    for stmt in KV_SCHEMA.split(";"):
        if stmt.strip():
            conn.execute(stmt)


class KvEventWriter:
    """Buffers batch rows and writes them with one executemany per flush (the caller commits
    through its RunWriter); at most FLUSH_BYTES of payloads wait. Not thread-safe."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        create_tables(conn)
        self._rows: list[tuple] = []
        self._bytes = 0

    def add_stream(self, endpoint: str, dp_rank: int, topic: str, replay: str | None) -> int:
        """A kv_streams row; its stream_id."""
        cur = self.conn.execute("INSERT INTO kv_streams (endpoint, dp_rank, topic, replay) "
                                "VALUES (?, ?, ?, ?)", (endpoint, dp_rank, topic, replay))
        return int(cur.lastrowid)  # type: ignore[arg-type]

    def add_batch(self, row: tuple) -> None:
        """row: values in KV_BATCH_COLS order (buffered; written by flush)."""
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
        """A stream's encoding, first batch time and summary (JSON), once known."""
        self.conn.execute("UPDATE kv_streams SET encoding = ?, first_t = ?, summary_json = ? "
                          "WHERE stream_id = ?", (encoding, first_t, None if summary is None
                                                  else json.dumps(summary), stream_id))

    def flush(self) -> None:
        if self._rows:
            self.conn.executemany(f"INSERT INTO kv_batches ({', '.join(KV_BATCH_COLS)}) VALUES "
                                  f"({', '.join('?' * len(KV_BATCH_COLS))})", self._rows)
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
