"""The recording format: table layout, file checks, and BlockMap <-> bytes (docs/FORMAT.md).

Block maps use the encoding "rle-zlib-1".

A map is cut into runs of adjacent blocks whose five planes (owner, filled, allocated,
refcount, cached) are all equal. Each run-level array (run lengths and one value per plane)
is shifted by its minimum, narrowed to the smallest unsigned dtype that holds it and
compressed with zlib level 1:

    plane[i] = np.repeat(decode(values) , decode(lengths))      decode(x) = uint + offset

Live KV maps are long runs (a sequence's full blocks, a contiguous reservation, free space),
so this is small and fast: a few ms for 1M blocks, no per-block Python work.
"""
from __future__ import annotations

import json
import sqlite3
import zlib
from pathlib import Path
from typing import NamedTuple

import numpy as np

from kvviz import FORMAT_VERSION
from kvviz.blockmap import BlockMap
from kvviz.errors import StoreError
from kvviz.metrics import Metrics

ENCODING = "rle-zlib-1"
PLANES = ("owner", "filled", "allocated", "refcount", "cached")
PLANE_DTYPES = {"owner": np.int32, "filled": np.int32, "allocated": np.int32,
                "refcount": np.int16, "cached": np.bool_}
LEVEL = 1  # zlib level: speed over the last few percent of size
# Z_RLE: deflate with matches of distance 1 only. The planes are run values (an owner id per
# run, mostly distinct), where searching for longer matches costs time and finds little:
# 30-60% faster than the default strategy on 10^5-run maps, 4-7% larger (docs/BENCHMARKS.md).
# Any zlib decoder reads it.
STRATEGY = zlib.Z_RLE


def _deflate(data: bytes) -> bytes:
    z = zlib.compressobj(LEVEL, zlib.DEFLATED, 15, 8, STRATEGY)
    return z.compress(data) + z.flush()
APP_ID = 0x6B76767A  # "kvvz" in PRAGMA application_id: tells our files from other SQLite files
STATUSES = ("running", "finished", "stopped", "error")
COUNTERS = ("preemptions", "admit_failures_capacity", "admit_failures_fragmentation",
            "admit_failures_policy", "tokens_generated", "tokens_per_s", "running", "waiting")
SAMPLE_COLS = ("t", "step", "lane", *Metrics._fields, *COUNTERS)
EVENT_COLS = ("t", "step", "lane", "kind", "seq_id", "reason", "need_tokens", "free_tokens",
              "largest_hole_tokens", "count")
MAP_COLS = ("sample_id", "lane", "t", "step", "idx", "num_blocks", "block_size",
            "bytes_per_token", "label", "contiguous", "encoding", "runs", "layout", "nbytes",
            "lengths", *PLANES, "final_seq", "final_len", "final_held", "buddy")
FINALS = ("final_seq", "final_len", "final_held")
SCHEMA = f"""
CREATE TABLE run (id INTEGER PRIMARY KEY CHECK (id = 1), app TEXT NOT NULL,
  format_version INTEGER NOT NULL, kvviz_version TEXT, created_unix REAL, meta TEXT NOT NULL,
  status TEXT NOT NULL, status_message TEXT NOT NULL DEFAULT '', heartbeat_unix REAL,
  blockmap_stride INTEGER NOT NULL DEFAULT 1);
CREATE TABLE samples (sample_id INTEGER PRIMARY KEY, t REAL NOT NULL, step INTEGER NOT NULL,
  lane TEXT NOT NULL, {", ".join(c for c in SAMPLE_COLS[3:])});
CREATE INDEX samples_lane_t ON samples (lane, t);
CREATE TABLE blockmaps (sample_id INTEGER PRIMARY KEY, {", ".join(MAP_COLS[1:])});
CREATE INDEX blockmaps_lane_t ON blockmaps (lane, t);
CREATE TABLE events (event_id INTEGER PRIMARY KEY, {", ".join(EVENT_COLS)});
CREATE INDEX events_t ON events (t);
CREATE TABLE device_memory (row_id INTEGER PRIMARY KEY, t REAL NOT NULL);
"""


def where(since_col: str = "t", **conds: object) -> tuple[str, tuple]:
    """A SQL WHERE clause and its parameters: `key = ?` per condition, `key IN (...)` for a
    list, `since_col > ?` for since_t; None values are left out."""
    parts, params = [], []
    for key, val in conds.items():
        if val is None:
            continue
        if key == "since_t":
            parts.append(f"{since_col} > ?")
        elif isinstance(val, list):
            parts.append(f"{key} IN ({', '.join('?' * len(val))})")
            params.extend(val)
            continue
        else:
            parts.append(f"{key} = ?")
        params.append(val)
    return (" WHERE " + " AND ".join(parts)) if parts else "", tuple(params)


class EncodedMap(NamedTuple):
    num_blocks: int
    runs: int
    layout: str  # JSON: {array name: {"dtype": numpy dtype name, "offset": int}}
    blobs: dict[str, bytes | None]  # lengths, the five planes, final_seq/len/held
    nbytes: int  # total compressed bytes


def _narrow(a: np.ndarray) -> tuple[bytes, dict]:
    """Shift by the minimum, store in the smallest unsigned dtype, zlib-compress."""
    if a.size == 0:
        return _deflate(b""), {"dtype": "uint8", "offset": 0}
    lo, hi = int(a.min()), int(a.max())
    span = hi - lo
    dt = np.uint8 if span < 2**8 else np.uint16 if span < 2**16 else np.uint32
    if span >= 2**32:
        dt = np.uint64
    q = (a.astype(np.int64) - lo).astype(dt) if lo else a.astype(dt)
    return _deflate(q.tobytes()), {"dtype": np.dtype(dt).name, "offset": lo}


def encode(bm: BlockMap) -> EncodedMap:
    n = bm.num_blocks
    planes = [getattr(bm, p) for p in PLANES]
    if n:
        change = planes[0][1:] != planes[0][:-1]
        for arr in planes[1:]:
            change |= arr[1:] != arr[:-1]
        starts = np.flatnonzero(change)
        starts += 1
        starts = np.concatenate((np.zeros(1, starts.dtype), starts))
    else:
        starts = np.zeros(0, np.int64)
    lengths = np.diff(np.append(starts, n))
    layout: dict[str, dict] = {}
    blobs: dict[str, bytes | None] = {}
    blobs["lengths"], layout["lengths"] = _narrow(lengths)
    for name, arr in zip(PLANES, planes):
        vals = arr[starts]
        blobs[name], layout[name] = _narrow(vals.view(np.uint8) if vals.dtype == np.bool_ else vals)
    for name in FINALS:
        arr = getattr(bm, name)
        if arr is None:
            blobs[name] = None
        else:
            blobs[name], layout[name] = _narrow(np.asarray(arr))
    nbytes = sum(len(b) for b in blobs.values() if b is not None)
    return EncodedMap(n, int(starts.size), json.dumps(layout), blobs, nbytes)


def _unpack(blob: bytes, spec: dict) -> np.ndarray:
    raw = np.frombuffer(zlib.decompress(blob), dtype=np.dtype(spec["dtype"]))
    off = int(spec["offset"])
    return raw.astype(np.int64) + off if off else raw


def decode(num_blocks: int, runs: int, layout: str, blobs: dict[str, bytes | None], *,
           block_size: int, bytes_per_token: int, label: str, contiguous: bool,
           buddy: bool = False) -> BlockMap:
    """Inverse of encode. Raises ValueError when the pieces do not fit together."""
    spec = json.loads(layout)
    lengths = _unpack(blobs["lengths"], spec["lengths"]).astype(np.int64)  # type: ignore[arg-type]
    if lengths.size != runs or int(lengths.sum()) != num_blocks:
        raise ValueError(f"run lengths add up to {int(lengths.sum())} blocks in {lengths.size} "
                         f"runs, expected {num_blocks} blocks in {runs} runs")
    arrays = {}
    for name in PLANES:
        vals = _unpack(blobs[name], spec[name])  # type: ignore[arg-type]
        if vals.size != runs:
            raise ValueError(f"{name}: {vals.size} run values, expected {runs}")
        arrays[name] = np.repeat(vals.astype(PLANE_DTYPES[name]), lengths)
    finals = {}
    for name in FINALS:
        blob = blobs.get(name)
        dtype = np.int64 if name == "final_held" else np.int32
        finals[name] = None if blob is None else _unpack(blob, spec[name]).astype(dtype)
    return BlockMap(**arrays, block_size=block_size, bytes_per_token=bytes_per_token,
                    label=label, contiguous=contiguous, buddy=buddy, **finals)


def open_checked(path: Path) -> sqlite3.Connection:
    """A read-only connection to a kvviz recording; StoreError says what is wrong otherwise."""
    if not path.exists():
        raise StoreError(f"{path}: no such file")
    if not path.is_file():
        raise StoreError(f"{path}: not a file")
    size = path.stat().st_size
    if size == 0:
        raise StoreError(f"{path}: empty file (0 bytes), not a kvviz recording")
    with path.open("rb") as fh:
        head = fh.read(100)
    if not head.startswith(b"SQLite format 3\x00"):
        raise StoreError(f"{path}: not a SQLite database, so not a kvviz recording")
    if len(head) < 100:
        raise StoreError(f"{path}: truncated ({size} bytes, shorter than a SQLite header)")
    app_id = int.from_bytes(head[68:72], "big")
    if app_id != APP_ID:
        raise StoreError(f"{path}: a SQLite database of another application "
                         f"(application_id {app_id:#x}), not a kvviz recording")
    page = int.from_bytes(head[16:18], "big")
    page = 65536 if page == 1 else page
    pages = int.from_bytes(head[28:32], "big")
    if not Path(f"{path}-wal").exists() and (size % page or size < pages * page):
        raise StoreError(f"{path}: truncated ({size} bytes; its header says "
                         f"{pages} pages of {page} bytes)")
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True,
                               check_same_thread=False)
        row = conn.execute("SELECT app, format_version FROM run WHERE id = 1").fetchone()
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"{path}: damaged or truncated recording ({exc})") from None
    if row is None or row[0] != "kvviz":
        raise StoreError(f"{path}: the run header is missing; not a complete kvviz recording")
    if int(row[1]) > FORMAT_VERSION:
        raise StoreError(f"{path}: format version {row[1]} is newer than this kvviz reads "
                         f"({FORMAT_VERSION}); upgrade kvviz")
    return conn
