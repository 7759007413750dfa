"""Reading a recording (docs/STORE_API.md): RunReader, safe while the writer runs."""
from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path

import pandas as pd

from kvviz.blockmap import BlockMap
from kvviz.errors import StoreError
from kvviz.store import checks as check
from kvviz.store import event_frames, mapcodec
from kvviz.store import events as store_events
from kvviz.store import schema as codec
from kvviz.store.schema import COUNTERS, EVENT_COLS, MAP_COLS, NODE_COLS, SAMPLE_COLS

SAMPLE_NUMERIC = ("sample_id", *(c for c in SAMPLE_COLS if c != "lane"))
EVENT_NUMERIC = tuple(c for c in EVENT_COLS if c not in ("lane", "kind", "reason"))
NODE_TEXT = ("url", "status", "message", "engine")
STALE_S = 30.0  # a "running" run whose heartbeat is older: its writer was killed
STOPPED_UNEXPECTEDLY = "stopped unexpectedly"


class RunReader:
    """Reads a run at any time, also while its writer runs (each query sees a committed
    prefix). Safe to share between threads."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self.conn = codec.open_checked(self.path)
        self.meta: dict = {}
        self.status = ""
        self.status_message = ""
        try:
            self._chunks = self._has("event_chunks")  # format 2 on
            self.refresh()
        except BaseException:
            self.conn.close()
            raise

    def _has(self, table: str) -> bool:
        return bool(self._q("SELECT 1 FROM sqlite_master WHERE name = ?", (table,)))

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
        """The status to show: "stopped unexpectedly" for a run that still says "running"
        but whose writer has not committed for stale_after_s (it was killed)."""
        if self.status == "running" and self.heartbeat is not None and (
                time.time() - self.heartbeat > self.stale_after_s):
            return STOPPED_UNEXPECTEDLY
        return self.status

    @property
    def stale_after_s(self) -> float:
        """STALE_S, or 3 sampling periods of a slower collector or scrape (from meta)."""
        periods = []
        hz = (self.meta.get("collector") or {}).get("hz") if isinstance(
            self.meta.get("collector"), dict) else None
        if isinstance(hz, (int, float)) and hz > 0:
            periods.append(1.0 / hz)
        scrape = self.meta.get("scrape")
        every = scrape.get("interval_s") if isinstance(scrape, dict) else None
        if isinstance(every, (int, float)) and every > 0:
            periods.append(float(every))
        return max([STALE_S, *(3 * p for p in periods)])

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
        where, params = codec.where(lane=lane, since_t=since_t)
        # Samples are written in time order, so (t, sample_id) is sample_id order; said this
        # way the planner walks the t index instead of scanning every row to skip a sort.
        return self._samples_frame(self._df(
            f"SELECT * FROM samples{where} ORDER BY t, sample_id", params))

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
        if not self._has("node_samples"):
            return pd.DataFrame(columns=list(NODE_COLS))
        if last is not None:
            df = self._df(_newest("node_samples", last), (int(last),))
        else:
            where, params = codec.where(since_t=since_t)
            df = self._df(f"SELECT * FROM node_samples{where} ORDER BY row_id", params)
        blobs = df.pop("raw_zlib") if "raw_zlib" in df else pd.Series([None] * len(df))
        check.frame(df, "node_samples", str(self.path), need=("row_id", "t"), text=NODE_TEXT,
                    numeric=tuple(c for c in ("row_id", *NODE_COLS) if c not in NODE_TEXT))
        if raw:
            df["raw"] = [{} if b is None else self._series(b) for b in blobs]
        return df.drop(columns="row_id")

    def _series(self, blob: object) -> dict:
        what = f"{self.path}: node sample series"
        try:
            out = json.loads(check.inflate(blob, what))
        except (ValueError, RecursionError) as exc:
            raise StoreError(f"{what} are not valid JSON ({exc})") from None
        if not isinstance(out, dict):
            raise StoreError(f"{what} must be a JSON object")
        return out

    def blockmap_rows(self) -> pd.DataFrame:
        """Every stored block map as its table row (encoded blobs included), checked."""
        return check.frame(self._df("SELECT * FROM blockmaps ORDER BY sample_id"), "blockmaps",
                           str(self.path), need=MAP_COLS, text=("lane", "label", "encoding",
                                                                 "layout"),
                           numeric=("sample_id", "step", "idx", "num_blocks", "block_size",
                                    "bytes_per_token", "contiguous", "runs", "nbytes",
                                    "buddy"))

    def blockmap_index(self, lane: str) -> pd.DataFrame:
        return check.frame(self._df("SELECT sample_id, t, step FROM blockmaps WHERE lane = ? "
                                    "ORDER BY sample_id", (lane,)), "blockmaps",
                           str(self.path), numeric=("sample_id", "step"))

    def _map(self, where: str, params: tuple) -> tuple[BlockMap, float] | None:
        # (t, sample_id) order: the index (lane, t) holds it (rowid last), so the newest
        # matching map is one seek, with no sort over the lane's maps and their blobs.
        rows = self._q(f"SELECT {', '.join(MAP_COLS)} FROM blockmaps WHERE {where} "
                       "ORDER BY t DESC, sample_id DESC LIMIT 1", params)
        if not rows:
            return None
        r = dict(zip(MAP_COLS, rows[0]))
        what = f"{self.path}: block map {r['sample_id']!r:.40}"
        if r["encoding"] not in mapcodec.ENCODINGS:
            raise StoreError(f"{what} uses unknown encoding {r['encoding']!r:.60}")
        t = float(check.number(r["t"], f"{what}: t"))
        for k in ("num_blocks", "runs", "block_size", "bytes_per_token"):
            check.number(r[k], f"{what}: {k}", integer=True, lo=1 if k == "block_size" else 0)
        if not isinstance(r["label"], str) or not isinstance(r["layout"], str):
            raise StoreError(f"{what}: label and layout must be text")
        if r["num_blocks"] > codec.MAX_BLOCKS:
            raise StoreError(f"{what}: num_blocks {r['num_blocks']} is more than "
                             f"{codec.MAX_BLOCKS}")
        cap = 16 * (r["num_blocks"] + r["runs"]) + 65536  # 8-byte values per block or run
        for k in codec.BLOB_COLS:
            check.bounded_streams(r[k], f"{what}: {k}", cap)
        try:  # stored bytes: any failure to decode them means damage, named here
            bm = mapcodec.decode(r["num_blocks"], r["runs"], r["layout"], r, block_size=r[
                "block_size"], bytes_per_token=r["bytes_per_token"], label=r["label"],
                contiguous=bool(r["contiguous"]), buddy=bool(r["buddy"]), encoding=r["encoding"])
        except Exception as exc:  # noqa: BLE001 - ValueError, TypeError, zlib.error, ...
            raise StoreError(f"{what} is damaged: {type(exc).__name__}: {exc}") from None
        return bm, t

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

    def _count(self, what: str, value: object) -> int:
        return int(check.number(value or 0, f"{self.path}: {what}", integer=True, lo=0))

    def summary(self) -> dict:
        """What `kvviz info` prints: status, lanes with their last counters, totals. The
        samples of a node recording (`kvviz scrape --out`) are its node_samples."""
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
                "samples": n, "blockmaps": int(maps[0]),
                "blockmap_bytes": self._count("table blockmaps column 'nbytes'", maps[1]),
                "failures": {c: self._count(f"table samples column 'admit_failures_{c}'",
                                            last.get(f"admit_failures_{c}"))
                             for c in ("capacity", "fragmentation", "policy")},
                "preemptions": self._counter(last, "preemptions"),
                "tokens_generated": self._counter(last, "tokens_generated"),
            }
        span = self._span("samples")
        node = self._span("node_samples") if self._has("node_samples") else (0, 0.0)
        n, dur = (span[0] + node[0], span[1] if span[0] else node[1])
        return {
            "path": str(self.path), "status": self.status, "state": self.state,
            "status_message": self.status_message,
            "format_version": self.format_version, "mode": self.meta.get("mode"),
            "device": self.meta.get("device"), "lanes": lanes,
            "duration_s": dur, "samples": n, "node_samples": node[0],
            "events": self._events_count(),
            "blockmap_stride": self.blockmap_stride,
            "heartbeat_age_s": None if self.heartbeat is None else time.time() - self.heartbeat,
        }

    def _events_count(self) -> int:
        try:
            return store_events.count(self._q, self._chunks)
        except ValueError as exc:
            raise StoreError(f"{self.path}: damaged events ({exc})") from None

    def _counter(self, last: dict, key: str) -> int | None:
        return None if last.get(key) is None else self._count(
            f"table samples column {key!r}", last[key])

    def _span(self, table: str) -> tuple[int, float]:
        """(rows, seconds from the first to the last) of a table with a `t` column."""
        lo, hi, n = self._q(f"SELECT MIN(t), MAX(t), COUNT(*) FROM {table}")[0]
        if not n:
            return 0, 0.0
        what = f"{self.path}: table {table} column 't'"
        return int(n), float(check.number(hi, what)) - float(check.number(lo, what))

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
