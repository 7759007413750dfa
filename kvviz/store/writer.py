"""The recording store: one SQLite file per run, WAL mode, one writer and many readers.

Tables and encodings are described in docs/FORMAT.md; the API in docs/STORE_API.md. Nothing
is pickled. The writer commits once per sample batch, so a killed writer loses only the
uncommitted tail. A new file appears at its final path only once its header is complete.
"""
from __future__ import annotations

import json
import os
import re
import sqlite3
import time
import zlib
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from kvviz import FORMAT_VERSION, __version__
from kvviz.core.blockmap import BlockMap
from kvviz.core.errors import StoreError
from kvviz.engine.eventlog import EventColumns
from kvviz.store import arraycodec as ac
from kvviz.store import eventcodec as store_events
from kvviz.store import mapcodec
from kvviz.store.kv_writer import KvEventWriter, add_own_batches
from kvviz.store.schema import APP_ID, BLOB_COLS, MAP_COLS, NODE_SCHEMA, SCHEMA, STATUSES

TABLES_ENCODING = "tables-zlib-1"
TABLES_SCHEMA = ("CREATE TABLE IF NOT EXISTS block_tables (sample_id INTEGER PRIMARY KEY, "
                 "lane TEXT NOT NULL, encoding TEXT NOT NULL, layout TEXT NOT NULL, "
                 "nbytes INTEGER NOT NULL, table_len BLOB NOT NULL, table_blocks BLOB NOT NULL)")
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")


def _py(v: object) -> object:
    return v.item() if hasattr(v, "item") else v  # numpy scalars -> int/float/bool


class RunWriter:
    """The one writer of a run. Not thread-safe: use it from one thread at a time."""

    def __init__(self, path: str | Path, meta: dict, *, blockmap_budget_bytes: int = 200 * 2**20,
                 overwrite: bool = False) -> None:
        self.path = Path(path)
        if blockmap_budget_bytes < 0:
            raise ValueError(f"blockmap budget: must be >= 0, got {blockmap_budget_bytes}")
        self.budget = blockmap_budget_bytes
        meta_json = json.dumps(meta)  # fails early (TypeError -> ValueError) on odd values
        if not self.path.parent.is_dir():
            raise StoreError(f"{self.path}: directory {self.path.parent} does not exist")
        if self.path.exists() and not overwrite:
            raise StoreError(f"{self.path}: already exists (choose another name or overwrite)")
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.partial")
        try:
            self._write_header(tmp, meta_json)
            if overwrite:
                for suffix in ("-wal", "-shm"):
                    Path(f"{self.path}{suffix}").unlink(missing_ok=True)
                os.replace(tmp, self.path)
            else:
                os.link(tmp, self.path)  # atomic, never clobbers a file created meanwhile
                tmp.unlink()
        except FileExistsError:
            tmp.unlink(missing_ok=True)
            raise StoreError(f"{self.path}: already exists") from None
        except (OSError, sqlite3.Error) as exc:
            tmp.unlink(missing_ok=True)
            raise StoreError(f"{self.path}: cannot create the recording ({exc})") from None
        self.conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=NORMAL")  # durable across a process kill
        self.conn.execute("BEGIN")
        self._cols = {t: self._columns(t) for t in ("samples", "device_memory")}
        self._stride = 1
        self._map_idx: dict[str, int] = {}
        self._latest: dict[str, tuple[int, int]] = {}  # lane -> (sample_id, idx)
        self._map_bytes = 0  # block maps and block tables
        self._tables = False  # block_tables created (on the first paged map with tables)
        self._next_event = store_events.next_event_id(self.conn)
        self._audit_rows: list[tuple] = []  # audit_failed events, written after the batch's
        self.closed = False

    @staticmethod
    def _write_header(tmp: Path, meta_json: str) -> None:
        tmp.unlink(missing_ok=True)
        conn = sqlite3.connect(tmp)
        try:
            conn.executescript(f"PRAGMA application_id={APP_ID};"
                               f"PRAGMA user_version={FORMAT_VERSION};" + SCHEMA +
                               store_events.CHUNK_SCHEMA)
            conn.execute("INSERT INTO run VALUES (1, 'kvviz', ?, ?, ?, ?, 'running', '', ?, 1)",
                         (FORMAT_VERSION, __version__, time.time(), meta_json, time.time()))
            conn.commit()
        finally:
            conn.close()

    def _columns(self, table: str) -> set[str]:
        return {r[1] for r in self.conn.execute(f"PRAGMA table_info({table})")}

    def _insert(self, table: str, rec: dict) -> int:
        cols = self._cols[table]
        for key, val in rec.items():
            if key not in cols:
                if not _IDENT.match(key):
                    raise ValueError(f"{table}: column name {key!r} is not an identifier")
                kind = ("TEXT" if isinstance(val, str) else "REAL" if isinstance(val, float)
                        else "INTEGER" if isinstance(val, int) else "")
                self.conn.execute(f'ALTER TABLE {table} ADD COLUMN "{key}" {kind}')
                cols.add(key)
        names = ", ".join(f'"{k}"' for k in rec)
        marks = ", ".join("?" * len(rec))
        cur = self.conn.execute(f"INSERT INTO {table} ({names}) VALUES ({marks})",
                                [_py(v) for v in rec.values()])
        return int(cur.lastrowid)  # type: ignore[arg-type]

    def add_sample(self, t: float, step: int, lane: str, metrics: dict,
                   blockmap: BlockMap | None = None) -> int:
        """`metrics` may also carry, besides columns, `audit_events` ((seq_id, check, reason)
        tuples: `audit_failed` events, written after the batch's engine events). A paged map's
        block tables travel in the BlockMap (table_len, table_blocks)."""
        metrics = dict(metrics)
        audit = metrics.pop("audit_events", None) or ()
        rec = {"t": float(t), "step": int(step), "lane": lane, **metrics}
        sid = self._insert("samples", rec)
        for seq, check, reason in audit:
            self._audit_rows.append((float(t), int(step), lane, int(seq), f"{check}: {reason}"))
        if blockmap is not None:
            self._add_blockmap(sid, float(t), int(step), lane, blockmap)
        return sid

    def _write_audit(self) -> None:
        rows, self._audit_rows = self._audit_rows, []
        if rows:
            first = self._next_event
            self.conn.executemany(
                "INSERT INTO events (event_id, t, step, lane, kind, seq_id, reason, need_tokens,"
                " free_tokens, largest_hole_tokens, count) VALUES "
                "(?, ?, ?, ?, 'audit_failed', ?, ?, 0, 0, 0, 1)",
                [(first + i, *r) for i, r in enumerate(rows)])
            self._next_event = first + len(rows)

    def _add_blockmap(self, sid: int, t: float, step: int, lane: str, bm: BlockMap) -> None:
        enc = mapcodec.encode(bm)
        idx = self._map_idx.get(lane, 0)
        self._map_idx[lane] = idx + 1
        row = (sid, lane, t, step, idx, enc.num_blocks, bm.block_size, bm.bytes_per_token,
               bm.label, int(bm.contiguous), mapcodec.ENCODING, enc.runs, enc.layout, enc.nbytes,
               *(enc.blobs[k] for k in BLOB_COLS),
               int(bm.buddy))
        self.conn.execute(f"INSERT INTO blockmaps VALUES ({', '.join('?' * len(MAP_COLS))})", row)
        self._map_bytes += enc.nbytes + self._add_tables(sid, lane, bm)
        prev = self._latest.get(lane)
        self._latest[lane] = (sid, idx)
        if prev is not None and prev[1] % self._stride:  # kept only while it was the latest
            self._drop("sample_id = ?", (prev[0],))
        if self._map_bytes > self.budget:
            self._thin()

    def _add_tables(self, sid: int, lane: str, bm: BlockMap) -> int:
        """A paged map's block tables, as a block_tables row (docs/FORMAT.md); its bytes."""
        if bm.table_len is None or bm.table_blocks is None:
            return 0
        if not self._tables:
            self.conn.execute(TABLES_SCHEMA)
            self._tables = True
        (lens, ls), (blocks, bs) = (ac.pack(np.asarray(a)) for a in (bm.table_len,
                                                                       bm.table_blocks))
        nbytes = len(lens) + len(blocks)
        self.conn.execute("INSERT INTO block_tables VALUES (?, ?, ?, ?, ?, ?, ?)",
                          (sid, lane, TABLES_ENCODING, json.dumps({"table_len": ls,
                                                                   "table_blocks": bs}),
                           nbytes, lens, blocks))
        return nbytes

    def _drop(self, where: str, params: tuple) -> None:
        """Delete the maps matching `where` (and their block tables), except each lane's
        latest; subtracts the bytes deleted. Cost: the rows matched."""
        keep = [s for s, _ in self._latest.values()]
        cond = f"({where}) AND sample_id NOT IN ({', '.join('?' * len(keep))})"
        args = (*params, *keep)
        gone = self.conn.execute(f"SELECT COALESCE(SUM(nbytes), 0) FROM blockmaps WHERE {cond}",
                                 args).fetchone()[0]
        if self._tables:  # a map's block tables go with it
            sel = f"sample_id IN (SELECT sample_id FROM blockmaps WHERE {cond})"
            gone += self.conn.execute(f"SELECT COALESCE(SUM(nbytes), 0) FROM block_tables "
                                      f"WHERE {sel}", args).fetchone()[0]
            self.conn.execute(f"DELETE FROM block_tables WHERE {sel}", args)
        self.conn.execute(f"DELETE FROM blockmaps WHERE {cond}", args)
        self._map_bytes -= int(gone)

    def _thin(self) -> None:
        """Keep every stride-th map per lane (plus each lane's latest); double the stride."""
        top = max(self._map_idx.values())
        while self._map_bytes > self.budget and len(self._latest) < self._count_maps():
            self._stride *= 2
            if self._stride > top:
                self._drop("1", ())
                break
            self._drop("idx % ? != 0", (self._stride,))
        self.conn.execute("UPDATE run SET blockmap_stride = ? WHERE id = 1", (self._stride,))

    def _count_maps(self) -> int:
        return int(self.conn.execute("SELECT COUNT(*) FROM blockmaps").fetchone()[0])

    def add_events(self, events: EventColumns | Iterable) -> None:
        """kvviz.engine.eventlog.EventColumns, or Event-like objects (attributes as its fields);
        admitted / finished go to event_chunks, the other kinds to events (store_events)."""
        if not isinstance(events, EventColumns):
            events = EventColumns.from_events(events)
        self._next_event = store_events.write(self.conn, events, self._next_event)
        self._write_audit()

    def add_device_memory(self, t: float, rec: dict) -> None:
        self._insert("device_memory", {"t": float(t), **rec})

    def add_node_sample(self, t: float, rec: dict, raw: dict | None = None) -> None:
        """One scrape of a serving node: `rec` holds NODE_COLS fields (t, time given here or
        in rec); `raw` maps series keys to values. The table is created on first use."""
        if "node_samples" not in self._cols:
            self.conn.execute(NODE_SCHEMA)
            self._cols["node_samples"] = self._columns("node_samples")
        blob = None if raw is None else zlib.compress(
            json.dumps(raw, separators=(",", ":")).encode(), 6)
        self._insert("node_samples", {**rec, "t": float(t), "raw_zlib": blob})

    def kv_events(self) -> KvEventWriter:
        """The writer of the kv_* tables on this run's connection (created on first use);
        this RunWriter's commit() commits what it wrote."""
        return KvEventWriter(self.conn)

    def add_own_kv_batches(self, t: float, rows: list[tuple]) -> None:
        """A collector's own published KV-event batches at run time t
        (kvviz.store.kv_writer.add_own_batches)."""
        add_own_batches(self.conn, t, rows)

    def set_status(self, status: str, message: str = "") -> None:
        if status not in STATUSES:
            raise ValueError(f"status: must be one of {list(STATUSES)}, got {status!r}")
        self.conn.execute("UPDATE run SET status = ?, status_message = ? WHERE id = 1",
                          (status, message))

    def commit(self) -> None:
        self._write_audit()
        self.conn.execute("UPDATE run SET heartbeat_unix = ? WHERE id = 1", (time.time(),))
        self.conn.execute("COMMIT")
        self.conn.execute("BEGIN")

    def close(self, status: str = "finished", message: str = "") -> None:
        if self.closed:
            return
        self.set_status(status, message)
        self.commit()
        self.conn.execute("COMMIT")
        self.closed = True
        try:  # a finished run becomes one self-contained file (fails if a reader is open)
            self.conn.execute("PRAGMA journal_mode=DELETE")
        except sqlite3.OperationalError:
            pass
        self.conn.close()
