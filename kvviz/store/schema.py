"""The recording format: table layout, file checks and the SQL helpers (docs/FORMAT.md).

Every table is declared here: run, samples, blockmaps, events, device_memory (SCHEMA),
node_samples (NODE_SCHEMA), kv_streams / kv_batches / kv_gaps (KV_SCHEMA); event_chunks and
block_tables beside their codecs (eventcodec.py, writer.py). Block map encodings live in
mapcodec.py. Standard library and numpy only.
"""
from __future__ import annotations

import sqlite3
from pathlib import Path

from kvviz import FORMAT_VERSION
from kvviz.core.errors import StoreError
from kvviz.core.metrics import Metrics
from kvviz.store.mapcodec import FINALS, PLANES

APP_ID = 0x6B76767A  # "kvvz" in PRAGMA application_id: tells our files from other SQLite files
STATUSES = ("running", "finished", "stopped", "error")
MAX_BLOCKS = 1 << 31  # a stored block map with more blocks is damaged (readers refuse it)
COUNTERS = ("preemptions", "admit_failures_capacity", "admit_failures_fragmentation",
            "admit_failures_policy", "tokens_generated", "tokens_per_s", "running", "waiting")
SAMPLE_COLS = ("t", "step", "lane", *Metrics._fields, *COUNTERS)
EVENT_COLS = ("t", "step", "lane", "kind", "seq_id", "reason", "need_tokens", "free_tokens",
              "largest_hole_tokens", "count")
BLOB_COLS = ("lengths", *PLANES, *FINALS)  # the encoded arrays of a block map (mapcodec)
MAP_COLS = ("sample_id", "lane", "t", "step", "idx", "num_blocks", "block_size",
            "bytes_per_token", "label", "contiguous", "encoding", "runs", "layout", "nbytes",
            *BLOB_COLS, "buddy")
SCHEMA = f"""
CREATE TABLE run (id INTEGER PRIMARY KEY CHECK (id = 1), app TEXT NOT NULL,
  format_version INTEGER NOT NULL, kvviz_version TEXT, created_unix REAL, meta TEXT NOT NULL,
  status TEXT NOT NULL, status_message TEXT NOT NULL DEFAULT '', heartbeat_unix REAL,
  blockmap_stride INTEGER NOT NULL DEFAULT 1);
CREATE TABLE samples (sample_id INTEGER PRIMARY KEY, t REAL NOT NULL, step INTEGER NOT NULL,
  lane TEXT NOT NULL, {", ".join(c for c in SAMPLE_COLS[3:])});
CREATE INDEX samples_lane_t ON samples (lane, t);
CREATE INDEX samples_t ON samples (t);
CREATE TABLE blockmaps (sample_id INTEGER PRIMARY KEY, {", ".join(MAP_COLS[1:])});
CREATE INDEX blockmaps_lane_t ON blockmaps (lane, t);
CREATE TABLE events (event_id INTEGER PRIMARY KEY, {", ".join(EVENT_COLS)});
CREATE INDEX events_t ON events (t);
CREATE INDEX events_kind ON events (kind);
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
    if not isinstance(row[1], int) or isinstance(row[1], bool):
        raise StoreError(f"{path}: run format_version must be an integer, got {row[1]!r:.60}")
    if row[1] > FORMAT_VERSION:
        raise StoreError(f"{path}: format version {row[1]} is newer than this kvviz reads "
                         f"({FORMAT_VERSION}); upgrade kvviz")
    return conn

# node_samples (mode "node" recordings, `kvviz scrape --out RUN.db`): kvviz.node.NodeSample
# fields; `raw` (every series of the scrape) is zlib-compressed JSON in `raw_zlib`.
NODE_COLS = ("t", "time", "url", "status", "message", "engine", "kv_usage", "kv_used_tokens",
             "kv_capacity_tokens", "num_running", "num_waiting", "preemptions_total",
             "prefix_queries_total", "prefix_hits_total", "prefix_hit_rate", "block_size",
             "num_gpu_blocks", "preemptions_per_s", "prefix_hit_rate_interval", "interval_s",
             "latency_s")
NODE_SCHEMA = ("CREATE TABLE IF NOT EXISTS node_samples (row_id INTEGER PRIMARY KEY, "
               f"{', '.join(NODE_COLS)}, raw_zlib BLOB)")

# kv_streams, kv_batches, kv_gaps (KV-event streams as received: `kvviz events`, `kvviz attach
# --kv-events`, `kvviz collect --kv-events`): one row per message, its raw payload kept, so a
# recording is lossless; counts per batch are columns so that timelines need no decoding.
KV_SCHEMA = """
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
KV_BATCH_COLS = ("stream_id", "seq", "t", "ts", "dp_rank", "n_events", "n_stored", "n_removed",
                 "n_cleared", "n_unknown", "replayed", "status", "topic", "payload")
KV_STATUSES = ("ok", "undecodable")
KV_GAP_KINDS = ("gap", "restart")
