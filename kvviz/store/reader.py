"""Reading a recording (docs/STORE_API.md): RunReader, safe while the writer runs.

Block maps are decoded by map_reader.py, the summary counted by summary.py, the kv_* tables
read by kv_reader.py (on a plain connection: kvviz.node reads them without pandas)."""
from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pandas as pd

from kvviz.core.blockmap import BlockMap
from kvviz.core.errors import StoreError
from kvviz.store import checks as check
from kvviz.store import event_frames, liveness, map_reader, schema, summary
from kvviz.store.contents import kv_events
from kvviz.store.schema import BLOB_COLS, EVENT_COLS, MAP_COLS, NODE_COLS, SAMPLE_COLS, where

SAMPLE_NUMERIC = ("sample_id", *(c for c in SAMPLE_COLS if c != "lane"))
EVENT_NUMERIC = tuple(c for c in EVENT_COLS if c not in ("lane", "kind", "reason"))
NODE_TEXT = ("url", "status", "message", "engine")


class RunReader:
    """Reads a run at any time, also while its writer runs (each query sees a committed
    prefix). Safe to share between threads."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self.conn = schema.open_checked(self.path)
        self.meta: dict = {}
        self.status = ""
        self.status_message = ""
        try:
            self._chunks = self.has_table("event_chunks")  # format 2 on
            self.refresh()
        except BaseException:
            self.conn.close()
            raise

    def has_table(self, table: str) -> bool:
        """Whether the recording holds `table` (node_samples, kv_batches, ... are optional)."""
        return bool(self._q("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                            (table,)))

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
        """Re-read the run header (status, heartbeat, metadata), checking every field."""
        rows = self._q("SELECT meta, status, status_message, heartbeat_unix, format_version, "
                       "blockmap_stride FROM run WHERE id = 1")
        if not rows:
            raise StoreError(f"{self.path}: the run header row is missing")
        (self.meta, self.status, self.status_message, self.heartbeat, self.format_version,
         self.blockmap_stride) = check.run_row(rows[0], str(self.path))

    @property
    def state(self) -> str:
        """The status to show (liveness.shown_state): "stopped unexpectedly" for a run that
        still says "running" but whose writer has not committed for stale_after_s."""
        return liveness.shown_state(self.status, self.heartbeat, self.meta)

    @property
    def stale_after_s(self) -> float:
        """STALE_S, or 3 sampling periods of a slower collector or scrape (from meta)."""
        return liveness.stale_after(self.meta)

    def lanes(self) -> list[str]:
        """The run header's lanes, then any other lane that has samples. Cost: one index
        seek per distinct lane (a skip scan of samples_lane_t), not a scan of the samples."""
        names = [x["name"] for x in self.meta.get("lanes", []) if "name" in x]
        seen = [r[0] for r in self._q(
            "WITH RECURSIVE l(name) AS (SELECT MIN(lane) FROM samples UNION ALL "
            "SELECT (SELECT MIN(lane) FROM samples WHERE lane > l.name) FROM l "
            "WHERE l.name IS NOT NULL) SELECT name FROM l WHERE name IS NOT NULL")]
        if not all(isinstance(n, str) for n in seen):
            raise StoreError(f"{self.path}: table samples column 'lane' holds values that "
                             "are not text")
        return names + [n for n in seen if n not in names]

    def last_t(self) -> float | None:
        """Time of the newest sample (None when there is none). Samples are written in time
        order, so it is the last row: one seek on the primary key."""
        row = self._q("SELECT t FROM samples ORDER BY sample_id DESC LIMIT 1")
        if not row or row[0][0] is None:
            return None
        return float(check.number(row[0][0], f"{self.path}: table samples column 't'"))

    def samples(self, lane: str | None = None, since_t: float | None = None) -> pd.DataFrame:
        """One row per lane per sample, in time order; since_t is exclusive. Cost: the rows
        returned (an index range on (lane, t), or on t; recordings written before that index
        existed scan all samples when no lane is given)."""
        cond, params = where(lane=lane, since_t=since_t)
        # Samples are written in time order, so (t, sample_id) is sample_id order; said this
        # way the planner walks the t index instead of scanning every row to skip a sort.
        return self._samples_frame(self._df(
            f"SELECT * FROM samples{cond} ORDER BY t, sample_id", params))

    def _samples_frame(self, df: pd.DataFrame) -> pd.DataFrame:
        """Sample rows checked field by field (a damaged file: one StoreError naming it)."""
        return check.frame(df, "samples", str(self.path), need=("sample_id", "t", "step", "lane"),
                           text=("lane",), numeric=SAMPLE_NUMERIC)

    def span(self) -> tuple[float, float] | None:
        """(first t, last t) of the samples, None without samples. Two index seeks."""
        row = self._q("SELECT MIN(t), MAX(t) FROM samples")[0]
        if row[0] is None:
            return None
        what = f"{self.path}: table samples column 't'"
        return float(check.number(row[0], what)), float(check.number(row[1], what))

    def sample_at(self, lane: str, t: float) -> pd.DataFrame:
        """The latest sample of `lane` at or before t (one row, or none). One index seek."""
        return self._samples_frame(self._df(
            "SELECT * FROM samples WHERE lane = ? AND t <= ? ORDER BY t DESC, sample_id DESC "
            "LIMIT 1", (lane, float(t))))

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
        lanes = self.lanes() if lanes is None else lanes  # before the (non-reentrant) lock
        with self._lock:
            try:
                for lane in lanes:
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
        return self._samples_frame(pd.concat(parts, ignore_index=True).sort_values(
            ["t", "sample_id"], ignore_index=True))

    def count_events(self, kind: str) -> int:
        """How many events of one kind the recording holds (an index count for row kinds)."""
        return int(self._q("SELECT COUNT(*) FROM events WHERE kind = ?", (kind,))[0][0])

    def events(self, lane: str | None = None, kinds: list[str] | None = None,
               since_t: float | None = None, limit: int | None = None) -> pd.DataFrame:
        """Events in order; with `limit`, the latest `limit` of them (still in order)."""
        try:
            df = event_frames.read(self._q, self._df, self._chunks, lane, kinds, since_t,
                                   limit)
        except (ValueError, TypeError, OverflowError) as exc:
            raise StoreError(f"{self.path}: damaged events ({exc})") from None
        return check.frame(df, "events", str(self.path), need=EVENT_COLS,
                           text=("lane", "kind", "reason"), numeric=EVENT_NUMERIC)

    def device_memory(self, last: int | None = None) -> pd.DataFrame:
        """Device-memory rows in time order; `last`: only the newest that many (a seek on
        the row id: O(last), whatever the recording's length)."""
        df = self._df(_newest("device_memory", last), () if last is None else (int(last),))
        check.frame(df, "device_memory", str(self.path), need=("row_id", "t"),
                    numeric=("row_id", "device_index"), suffix="_bytes")
        return df.drop(columns="row_id")

    def node_samples(self, since_t: float | None = None, raw: bool = False,
                     last: int | None = None) -> pd.DataFrame:
        """Scrapes of a node recording in time order (empty for other recordings): NODE_COLS
        and any added columns; with raw=True a `raw` column of {series key: value} dicts.
        `last`: only the newest that many scrapes, O(last) (a seek on the row id); since_t
        scans the table."""
        if not self.has_table("node_samples"):
            return pd.DataFrame(columns=list(NODE_COLS))
        if last is not None:
            df = self._df(_newest("node_samples", last), (int(last),))
        else:
            cond, params = where(since_t=since_t)
            df = self._df(f"SELECT * FROM node_samples{cond} ORDER BY row_id", params)
        blobs = df.pop("raw_zlib") if "raw_zlib" in df else pd.Series([None] * len(df))
        check.frame(df, "node_samples", str(self.path), need=("row_id", "t"), text=NODE_TEXT,
                    numeric=tuple(c for c in ("row_id", *NODE_COLS) if c not in NODE_TEXT))
        if raw:
            what = f"{self.path}: node sample series"
            df["raw"] = [{} if b is None else check.json_object(b, what, map_reader.RAW_CAP)
                         for b in blobs]
        return df.drop(columns="row_id")

    def blockmap_rows(self) -> pd.DataFrame:
        """Every stored block map as its table row (encoded blobs included), the columns
        besides the blobs checked (the blobs are checked when decoded: blockmap())."""
        df = self._df("SELECT * FROM blockmaps ORDER BY sample_id")
        check.frame(df.drop(columns=[c for c in BLOB_COLS if c in df.columns]), "blockmaps",
                    str(self.path), need=tuple(c for c in MAP_COLS if c not in BLOB_COLS),
                    text=("lane", "label", "encoding", "layout"),
                    numeric=("sample_id", "step", "idx", "num_blocks", "block_size",
                             "bytes_per_token", "contiguous", "runs", "nbytes", "buddy"))
        missing = [c for c in BLOB_COLS if c not in df.columns]
        if missing:
            raise StoreError(f"{self.path}: table blockmaps has no column {missing[0]!r}")
        return df

    def blockmap_index(self, lane: str | None = None) -> pd.DataFrame:
        """sample_id, lane, t, step of every kept map (of one lane), in sample_id order. Cost:
        the rows (no blob read)."""
        cond, params = where(lane=lane)
        return check.frame(self._df(f"SELECT sample_id, lane, t, step FROM blockmaps{cond} "
                                    "ORDER BY sample_id", params), "blockmaps",
                           str(self.path), text=("lane",), numeric=("sample_id", "step"))

    def blockmap_blocks(self) -> int:
        """Σ num_blocks of the kept maps (rows a decoded export of them has)."""
        total = self._q("SELECT TOTAL(num_blocks) FROM blockmaps")[0][0]  # a float: no overflow
        return int(check.number(total, f"{self.path}: table blockmaps column 'num_blocks'",
                                lo=0))

    def refuse_oversized_blobs(self) -> None:
        """StoreError naming the first blob longer than its row allows (map_reader.BOUNDS),
        decided from lengths alone: no blob is read or inflated."""
        tables = {r[0] for r in self._q("SELECT name FROM sqlite_master WHERE type = 'table'")}
        map_reader.refuse_oversized(self._q, str(self.path), tables)

    def table(self, name: str) -> pd.DataFrame:
        """Every row of table `name` as stored (blobs as bytes), in row order, for export;
        first every value is checked against its column's declared type (a hand-edited value
        is one StoreError naming table, column and kind). Cost: the whole table."""
        if not check.IDENT.match(name) or not self.has_table(name):
            raise StoreError(f"{self.path}: no table {name!r}")
        check.declared_types(self._q, name, str(self.path))
        return self._df(f"SELECT * FROM {name} ORDER BY rowid")

    def kv_counts(self) -> dict:
        """What the kv_* tables hold, counted in SQL ({} without them): contents.kv_events."""
        return kv_events(self._q, str(self.path))

    def _map(self, cond: str, params: tuple) -> tuple[BlockMap, float] | None:
        # (t, sample_id) order: the index (lane, t) holds it (rowid last), so the newest
        # matching map is one seek, with no sort over the lane's maps and their blobs.
        rows = self._q(f"{map_reader.SELECT_MAP} WHERE {cond} ORDER BY t DESC, sample_id DESC "
                       "LIMIT 1", params)
        return None if not rows else map_reader.decode_row(dict(zip(MAP_COLS, rows[0])),
                                                           str(self.path))

    def blockmap(self, sample_id: int) -> BlockMap:
        got = self._map("sample_id = ?", (int(sample_id),))
        if got is None:
            raise StoreError(f"{self.path}: no block map for sample {sample_id} "
                             "(never stored, or thinned by retention)")
        return got[0]

    def blockmap_at(self, lane: str, t: float) -> tuple[BlockMap, float] | None:
        """The latest kept map of `lane` at or before time t, with its time. One index seek."""
        return self._map("lane = ? AND t <= ?", (lane, float(t)))

    def latest_blockmap(self, lane: str) -> tuple[BlockMap, float] | None:
        """The newest kept map of `lane`, with its time. One index seek."""
        return self._map("lane = ?", (lane,))

    def summary(self) -> dict:
        """What `kvviz info` prints (summary.summarize): status, lanes with their last
        counters, totals; the header is re-read first."""
        self.refresh()
        return summary.summarize(self, self._q)

    def close(self) -> None:
        with self._lock:
            self.conn.close()


def _newest(table: str, last: int | None) -> str:
    """SQL for a table's rows in row-id order; with `last`, only the newest that many (the
    inner query walks the primary key backwards from its end)."""
    if last is None:
        return f"SELECT * FROM {table} ORDER BY row_id"
    return (f"SELECT * FROM (SELECT * FROM {table} ORDER BY row_id DESC LIMIT ?) "
            "ORDER BY row_id")
