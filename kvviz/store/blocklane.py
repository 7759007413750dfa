"""A node's real block pool as a lane of a recording (`kvviz attach --blocks`): the lane's
entry in run.meta, the request log and the stream's gaps (docs/FORMAT.md, "request_log" and
"block_gaps"). The maps, tables, samples and events go through RunWriter as every lane's do.
Standard library only; the caller commits (RunWriter.commit)."""
from __future__ import annotations

import json
import sqlite3

REQUEST_LOG_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS request_log (lane TEXT NOT NULL, seq_id INTEGER NOT NULL, "
    "request_id TEXT NOT NULL, arrive_step INTEGER NOT NULL, t REAL NOT NULL, "
    "prompt_tokens INTEGER NOT NULL, max_tokens INTEGER NOT NULL, hash_width INTEGER NOT NULL,"
    " prompt_hashes BLOB NOT NULL, finish_step INTEGER, output_tokens INTEGER, "
    "finish_status TEXT, preemptions INTEGER, PRIMARY KEY (lane, seq_id))")
GAPS_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS block_gaps (gap_id INTEGER PRIMARY KEY, lane TEXT NOT NULL, "
    "t REAL NOT NULL, kind TEXT NOT NULL, first_seq INTEGER NOT NULL, last_seq INTEGER NOT "
    "NULL, dropped INTEGER NOT NULL)")


def register_lane(conn: sqlite3.Connection, lane: dict, engine: dict, blocks: dict) -> None:
    """Add `lane` to run.meta's lanes (once per name), and the node's scheduler settings
    (`engine`, docs/FORMAT.md's meta.engine) and the stream's `blocks` entry."""
    meta = json.loads(conn.execute("SELECT meta FROM run WHERE id = 1").fetchone()[0])
    lanes = [ln for ln in meta.get("lanes", []) if ln.get("name") != lane["name"]]
    meta["lanes"] = [*lanes, lane]
    meta["engine"] = engine
    meta.setdefault("cache", {}).setdefault("capacity_tokens", {})[lane["name"]] = \
        lane["capacity_tokens"]
    meta.setdefault("blocks", {})[lane["name"]] = blocks
    conn.execute("UPDATE run SET meta = ? WHERE id = 1", (json.dumps(meta),))
    conn.execute(REQUEST_LOG_SCHEMA)
    conn.execute(GAPS_SCHEMA)


def add_arrivals(conn: sqlite3.Connection, lane: str, t: float, rows: list) -> None:
    """rows: [seq, request_id, arrive_step, prompt_tokens, max_tokens, hashes, width]."""
    conn.executemany(
        "INSERT OR REPLACE INTO request_log (lane, seq_id, request_id, arrive_step, t, "
        "prompt_tokens, max_tokens, prompt_hashes, hash_width) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [(lane, int(r[0]), str(r[1]), int(r[2]), t, int(r[3]), int(r[4]), bytes(r[5]),
          int(r[6])) for r in rows])


def add_finishes(conn: sqlite3.Connection, lane: str, rows: list) -> None:
    """rows: [seq, finish_step, output_tokens, status, preemptions] (requests whose arrival
    the recording missed keep no row)."""
    conn.executemany(
        "UPDATE request_log SET finish_step = ?, output_tokens = ?, finish_status = ?, "
        "preemptions = ? WHERE lane = ? AND seq_id = ?",
        [(int(r[1]), int(r[2]), str(r[3]), int(r[4]), lane, int(r[0])) for r in rows])


def add_gap(conn: sqlite3.Connection, lane: str, t: float, kind: str, first: int, last: int,
            dropped: int) -> None:
    conn.execute("INSERT INTO block_gaps (lane, t, kind, first_seq, last_seq, dropped) "
                 "VALUES (?, ?, ?, ?, ?, ?)", (lane, t, kind, first, last, dropped))
