"""Reading a recording (docs/STORE_API.md): RunReader, safe while the writer runs."""
from __future__ import annotations

import json
import sqlite3
import threading
import time
import zlib
from pathlib import Path

import pandas as pd

from kvviz.blockmap import BlockMap
from kvviz.errors import StoreError
from kvviz.store import event_frames, mapcodec, tablecodec
from kvviz.store import events as store_events
from kvviz.store import schema as codec
from kvviz.store.schema import COUNTERS, MAP_COLS, NODE_COLS


class RunReader:
    """Reads a run at any time, also while its writer runs (each query sees a committed
    prefix). Safe to share between threads."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self.conn = codec.open_checked(self.path)
        self._chunks = store_events.has_chunks(self.conn)  # format 2 on
        self.meta: dict = {}
        self.status = ""
        self.status_message = ""
        self.refresh()

    def _q(self, sql: str, params: tuple = ()) -> list[tuple]:
        try:
            with self._lock:
                return self.conn.execute(sql, params).fetchall()
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path}: cannot read the recording ({exc})") from None

    def _df(self, sql: str, params: tuple = ()) -> pd.DataFrame:
        try:
            with self._lock:
                return pd.read_sql_query(sql, self.conn, params=params)
        except (sqlite3.DatabaseError, pd.errors.DatabaseError) as exc:
            raise StoreError(f"{self.path}: cannot read the recording ({exc})") from None

    def refresh(self) -> None:
        meta, self.status, self.status_message, self.heartbeat, self.format_version, stride = (
            self._q("SELECT meta, status, status_message, heartbeat_unix, format_version, "
                    "blockmap_stride FROM run WHERE id = 1")[0])
        self.blockmap_stride = int(stride)
        try:
            self.meta = json.loads(meta)
        except json.JSONDecodeError as exc:
            raise StoreError(f"{self.path}: run metadata is not valid JSON ({exc})") from None

    def lanes(self) -> list[str]:
        """The run header's lanes, then any other lane that has samples. Cost: one index
        seek per distinct lane (a skip scan of samples_lane_t), not a scan of the samples."""
        names = [str(x["name"]) for x in self.meta.get("lanes", []) if "name" in x]
        seen = [r[0] for r in self._q(
            "WITH RECURSIVE l(name) AS (SELECT MIN(lane) FROM samples UNION ALL "
            "SELECT (SELECT MIN(lane) FROM samples WHERE lane > l.name) FROM l "
            "WHERE l.name IS NOT NULL) SELECT name FROM l WHERE name IS NOT NULL")]
        return names + [n for n in seen if n not in names]

    def last_t(self) -> float | None:
        """Time of the newest sample (None when there is none). Samples are written in time
        order, so it is the last row: one seek on the primary key."""
        row = self._q("SELECT t FROM samples ORDER BY sample_id DESC LIMIT 1")
        return None if not row or row[0][0] is None else float(row[0][0])

    def samples(self, lane: str | None = None, since_t: float | None = None) -> pd.DataFrame:
        """One row per lane per sample, in time order; since_t is exclusive. Cost: the rows
        returned (an index range on (lane, t), or on t; recordings written before that index
        existed scan all samples when no lane is given)."""
        where, params = codec.where(lane=lane, since_t=since_t)
        # Samples are written in time order, so (t, sample_id) is sample_id order; said this
        # way the planner walks the t index instead of scanning every row to skip a sort.
        return self._df(f"SELECT * FROM samples{where} ORDER BY t, sample_id", params)

    def span(self) -> tuple[float, float] | None:
        """(first t, last t) of the samples, None without samples. Two index seeks."""
        row = self._q("SELECT MIN(t), MAX(t) FROM samples")[0]
        return None if row[0] is None else (float(row[0]), float(row[1]))

    def sample_at(self, lane: str, t: float) -> pd.DataFrame:
        """The latest sample of `lane` at or before t (one row, or none). One index seek."""
        return self._df("SELECT * FROM samples WHERE lane = ? AND t <= ? "
                        "ORDER BY t DESC, sample_id DESC LIMIT 1", (lane, float(t)))

    def samples_thinned(self, max_points: int, lanes: list[str] | None = None) -> pd.DataFrame:
        """At most `max_points` samples per lane, evenly spread in time: the last sample of
        each of `max_points` equal time buckets (counters are cumulative, so the last one is
        right), in time order. Cost: one index seek per lane and bucket, then the rows kept:
        independent of the recording's length."""
        if max_points < 1:
            raise ValueError(f"max_points must be >= 1, got {max_points}")
        span = self.span()
        if span is None:
            return self.samples(lane="")  # the columns, no rows
        t0, t1 = span
        width = (t1 - t0) / max_points
        ends = [t0 + width * (b + 1) for b in range(max_points - 1)] + [t1]
        ids: set[int] = set()
        with self._lock:
            try:
                for lane in lanes if lanes is not None else self.lanes():
                    lo = t0 - 1.0
                    for end in ends:
                        row = self.conn.execute(
                            "SELECT sample_id, t FROM samples WHERE lane = ? AND t <= ? "
                            "ORDER BY t DESC, sample_id DESC LIMIT 1", (lane, end)).fetchone()
                        if row is not None and row[1] > lo:
                            ids.add(int(row[0]))
                        lo = end
            except sqlite3.DatabaseError as exc:
                raise StoreError(f"{self.path}: cannot read the recording ({exc})") from None
        keep = sorted(ids)
        parts = [self._df(f"SELECT * FROM samples WHERE sample_id IN "
                          f"({', '.join(map(str, keep[k:k + 5000]))})", ())
                 for k in range(0, len(keep), 5000)] or [self.samples(lane="")]
        return pd.concat(parts, ignore_index=True).sort_values(["t", "sample_id"],
                                                                ignore_index=True)

    def count_events(self, kind: str) -> int:
        """How many events of one kind the recording holds (an index count for row kinds)."""
        return int(self._q("SELECT COUNT(*) FROM events WHERE kind = ?", (kind,))[0][0])

    def events(self, lane: str | None = None, kinds: list[str] | None = None,
               since_t: float | None = None, limit: int | None = None) -> pd.DataFrame:
        """Events in order; with `limit`, the latest `limit` of them (still in order)."""
        try:
            return event_frames.read(self._q, self._df, self._chunks, lane, kinds, since_t,
                                     limit)
        except ValueError as exc:
            raise StoreError(f"{self.path}: damaged events ({exc})") from None

    def device_memory(self) -> pd.DataFrame:
        return self._df("SELECT * FROM device_memory ORDER BY row_id").drop(columns="row_id")

    def node_samples(self, since_t: float | None = None, raw: bool = False) -> pd.DataFrame:
        """Scrapes of a node recording in time order (empty for other recordings): NODE_COLS
        and any added columns; with raw=True a `raw` column of {series key: value} dicts."""
        if not self._q("SELECT 1 FROM sqlite_master WHERE name = 'node_samples'"):
            return pd.DataFrame(columns=list(NODE_COLS))
        where, params = codec.where(since_t=since_t)
        df = self._df(f"SELECT * FROM node_samples{where} ORDER BY row_id", params)
        blobs = df.pop("raw_zlib")
        if raw:
            try:
                df["raw"] = [{} if b is None else json.loads(zlib.decompress(b)) for b in blobs]
            except (zlib.error, ValueError) as exc:
                raise StoreError(f"{self.path}: node sample series are damaged ({exc})") from None
        return df.drop(columns="row_id")

    def blockmap_index(self, lane: str) -> pd.DataFrame:
        return self._df("SELECT sample_id, t, step FROM blockmaps WHERE lane = ? "
                        "ORDER BY sample_id", (lane,))

    def _map(self, where: str, params: tuple) -> tuple[BlockMap, float] | None:
        # (t, sample_id) order: the index (lane, t) holds it (rowid last), so the newest
        # matching map is one seek, with no sort over the lane's maps and their blobs.
        rows = self._q(f"SELECT {', '.join(MAP_COLS)} FROM blockmaps WHERE {where} "
                       "ORDER BY t DESC, sample_id DESC LIMIT 1", params)
        if not rows:
            return None
        r = dict(zip(MAP_COLS, rows[0]))
        if r["encoding"] not in mapcodec.ENCODINGS:
            raise StoreError(f"{self.path}: block map {r['sample_id']} uses unknown encoding "
                             f"{r['encoding']!r}")
        try:
            bm = mapcodec.decode(r["num_blocks"], r["runs"], r["layout"], r, block_size=r[
                "block_size"], bytes_per_token=r["bytes_per_token"], label=r["label"],
                contiguous=bool(r["contiguous"]), buddy=bool(r["buddy"]), encoding=r["encoding"])
        except (ValueError, TypeError, KeyError, zlib.error) as exc:
            raise StoreError(f"{self.path}: block map {r['sample_id']} is damaged: {exc}") from None
        return bm, float(r["t"])

    def blockmap(self, sample_id: int) -> BlockMap:
        got = self._map("sample_id = ?", (int(sample_id),))
        if got is None:
            raise StoreError(f"{self.path}: no block map for sample {sample_id} "
                             "(never stored, or thinned by retention)")
        return got[0]

    def block_tables(self, sample_id: int) -> tablecodec.BlockTables | None:
        """A paged lane's block tables stored with the map of `sample_id` (None when none
        were: a contiguous lane, an older recording, or thinned by retention)."""
        if not self._q("SELECT 1 FROM sqlite_master WHERE name = 'block_tables'"):
            return None
        rows = self._q("SELECT n_seqs, n_entries, encoding, data FROM block_tables "
                       "WHERE sample_id = ?", (int(sample_id),))
        if not rows:
            return None
        try:
            return tablecodec.decode(*rows[0])
        except (ValueError, TypeError) as exc:
            raise StoreError(f"{self.path}: block tables of sample {sample_id} are damaged: "
                             f"{exc}") from None

    def blockmap_at(self, lane: str, t: float) -> tuple[BlockMap, float] | None:
        """The latest kept map of `lane` at or before time t, with its time. One index seek."""
        return self._map("lane = ? AND t <= ?", (lane, float(t)))

    def latest_blockmap(self, lane: str) -> tuple[BlockMap, float] | None:
        """The newest kept map of `lane`, with its time. One index seek."""
        return self._map("lane = ?", (lane,))

    def summary(self) -> dict:
        self.refresh()
        lanes = {}
        for lane in self.lanes():
            n = int(self._q("SELECT COUNT(*) FROM samples WHERE lane = ?", (lane,))[0][0])
            rows = self._q(f"SELECT {', '.join(COUNTERS)} FROM samples WHERE lane = ? "
                           "ORDER BY sample_id DESC LIMIT 1", (lane,))
            last = dict(zip(COUNTERS, rows[0])) if rows else {}
            maps = self._q("SELECT COUNT(*), COALESCE(SUM(nbytes), 0) FROM blockmaps "
                           "WHERE lane = ?", (lane,))[0]
            lanes[lane] = {
                "samples": n, "blockmaps": int(maps[0]), "blockmap_bytes": int(maps[1]),
                "failures": {c: int(last.get(f"admit_failures_{c}") or 0)
                             for c in ("capacity", "fragmentation", "policy")},
                "preemptions": last.get("preemptions"),
                "tokens_generated": last.get("tokens_generated"),
            }
        span = self._q("SELECT MIN(t), MAX(t), COUNT(*) FROM samples")[0]
        return {
            "path": str(self.path), "status": self.status, "status_message": self.status_message,
            "format_version": self.format_version, "mode": self.meta.get("mode"),
            "device": self.meta.get("device"), "lanes": lanes,
            "duration_s": float(span[1] - span[0]) if span[2] else 0.0,
            "samples": int(span[2]),
            "events": store_events.count(self._q, self._chunks),
            "blockmap_stride": self.blockmap_stride,
            "heartbeat_age_s": None if self.heartbeat is None else time.time() - self.heartbeat,
        }

    def close(self) -> None:
        with self._lock:
            self.conn.close()
