"""Crafted recordings over docs/FORMAT.md's tables: every documented column retyped, dropped
or oversized, zlib bombs in every blob, deep JSON, hostile counts (issue 26 item 5).

The sources are real recordings: an engine run of every lane kind (collect, sim mode), a
KV-event recording (the subscriber path) and a node recording (RunWriter.add_node_sample).
"""
from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BLOBS = {"blockmaps": ("lengths", "owner", "filled", "allocated", "refcount", "cached",
                       "final_seq", "final_len", "final_held"),
         "block_tables": ("table_len", "table_blocks"), "event_chunks": ("data",),
         "node_samples": ("raw_zlib",)}
# every table FORMAT.md documents and the columns a crafted value goes in
TABLES = {
    "run": ("app", "format_version", "meta", "status", "status_message", "heartbeat_unix",
            "blockmap_stride"),
    "samples": ("t", "step", "lane", "used_tokens", "free_tokens", "external_frag_index",
                "preemptions", "tokens_generated", "tokens_per_s", "running"),
    "blockmaps": ("lane", "t", "step", "idx", "num_blocks", "block_size", "contiguous",
                  "encoding", "runs", "layout", *BLOBS["blockmaps"], "buddy"),
    "block_tables": ("lane", "encoding", "layout", *BLOBS["block_tables"]),
    "events": ("t", "step", "lane", "kind", "seq_id", "reason", "need_tokens", "free_tokens"),
    "event_chunks": ("lane", "kind", "n", "t_first", "t_last", "id_first", "id_last",
                     "encoding", "data"),
    "kv_streams": ("endpoint", "dp_rank", "topic", "replay", "encoding", "first_t",
                   "summary_json"),
    "kv_batches": ("stream_id", "seq", "t", "ts", "n_events", "n_stored", "status", "payload",
                   "replayed"),
    "kv_gaps": ("stream_id", "t", "kind", "first_seq", "last_seq", "filled"),
    "node_samples": ("t", "status", "kv_usage", "num_running", "raw_zlib"),
}
RETYPED = ("'x'", "x'00ff'", "1.5", "NULL", "-1", "0", "1e30", "-9e999", "9223372036854775807",
           "'[\"a\"]'", "'{}'")
DEEP = "[" * 100_000 + "]" * 100_000


def bomb(gib: int = 1) -> bytes:
    """zlib of `gib` GiB of zeros (about 1 MB per GiB), built a MiB at a time."""
    return bomb_mib(gib << 10)


def bomb_mib(mib: int) -> bytes:
    z = zlib.compressobj(9)
    zero = bytes(1 << 20)
    return b"".join(z.compress(zero) for _ in range(mib)) + z.flush()


def engine_run(path: Path) -> Path:
    """Every lane kind under pressure, prefix sharing, block tables, event chunks."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-m", "kvviz", "collect", "--mode", "sim", "--quiet",
                    "--steps-per-s", "0", "--hz", "20", "--lane", "contiguous:first-fit:max",
                    "--lane", "contiguous:buddy:pow2", "--lane", "paged:16", "--lane",
                    "paged:16:prefix", "--prefix-sharing", "0.5", "--rate", "inf",
                    "--requests", "120", "--duration", "30", "--out", str(path)],
                   cwd=ROOT, env=env, check=True, capture_output=True, timeout=120)
    return path


def node_run(path: Path) -> Path:
    from kvviz.store.writer import RunWriter

    w = RunWriter(path, {"mode": "node", "url": "http://n:8000/metrics", "lanes": []})
    for i, status in enumerate(["ok", "ok", "unreachable", "ok"]):
        rec = {"time": 1e9 + i, "url": "http://n:8000/metrics", "status": status,
               "message": "", "engine": "vllm", "kv_usage": 0.2 if status == "ok" else None}
        w.add_node_sample(float(i), rec, {"vllm:num_requests_running": i})
    w.close()
    return path


def kv_run(path: Path) -> Path:
    from tests.kvevents.recordings import write_kv_recording

    write_kv_recording(path, 45000)
    return path


def _tables(conn: sqlite3.Connection) -> set[str]:
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def edit(src: Path, dst: Path, how) -> Path:
    """A copy of src with `how` applied: SQL text, or a function of the connection."""
    shutil.copy(src, dst)
    conn = sqlite3.connect(dst)
    try:
        if callable(how):
            how(conn)
        else:
            conn.executescript(how)
        conn.commit()
    except (sqlite3.IntegrityError, sqlite3.OperationalError):
        pass  # a NOT NULL / CHECK the file refuses, or a table this source lacks
    finally:
        conn.close()
    return dst


def drop(table: str, col: str):
    """The column removed (its indexes first)."""
    def go(conn: sqlite3.Connection) -> None:
        for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index' AND "
                                    "tbl_name = ? AND sql LIKE ?", (table, f"%{col}%")):
            conn.execute(f"DROP INDEX {name}")
        conn.execute(f"ALTER TABLE {table} DROP COLUMN {col}")
    return go


def layouts(change):
    """Every block map's layout JSON changed by change(layout) (in place)."""
    def go(conn: sqlite3.Connection) -> None:
        for sid, text in conn.execute("SELECT sample_id, layout FROM blockmaps").fetchall():
            layout = json.loads(text)
            change(layout)
            conn.execute("UPDATE blockmaps SET layout = ? WHERE sample_id = ?",
                         (json.dumps(layout), sid))
    return go


def _planes_owner(layout: dict, key: str, value) -> None:
    spec = layout.get("arrays", {}).get("owner", {})
    if layout.get("mode") == "planes" and spec.get("runs") is None:
        spec[key] = value


def _all_specs(layout: dict, key: str, value) -> None:
    for spec in layout.get("arrays", {}).values():
        spec[key] = value


BOMBED_ROWS = 4  # rows a blob case rewrites: enough to be found, a few MB on disk


def set_blobs(table: str, cols: tuple[str, ...], blob: bytes, rows: int | None = BOMBED_ROWS):
    """`blob` in `cols` of the table's first `rows` rows (None: every row, which makes a
    recording of thousands of maps GBs on disk per case)."""
    where = "" if rows is None else (f" WHERE rowid IN (SELECT rowid FROM {table} ORDER BY "
                                     f"rowid LIMIT {int(rows)})")

    def go(conn: sqlite3.Connection) -> None:
        for col in cols:
            conn.execute(f"UPDATE {table} SET {col} = ?{where}", (blob,))
    return go


def named(big_bomb: bytes) -> dict:
    """The issue's cases and their kin, by name."""
    multi = big_bomb * 4  # streams back to back: a blob declaring 4x as much
    cases = {
        "format_version text": "UPDATE run SET format_version = 'four'",
        "format_version blob": "UPDATE run SET format_version = x'04'",
        "format_version zero": "UPDATE run SET format_version = 0",
        "meta deep list": f"UPDATE run SET meta = '{DEEP}'",
        "meta deep inside": "UPDATE run SET meta = '{\"lanes\": [], \"x\": " + "[" * 200
                            + "]" * 200 + "}'",
        "meta lane name list": "UPDATE run SET meta = json_set(meta, '$.lanes[0].name', "
                               "json('[\"a\", \"b\"]'))",
        "meta lanes object": "UPDATE run SET meta = json_set(meta, '$.lanes', json('{}'))",
        "idx text": "UPDATE blockmaps SET idx = 'zero'",
        "block_size text": "UPDATE blockmaps SET block_size = 'sixteen'",
        "block_size huge": "UPDATE blockmaps SET block_size = 9223372036854775807",
        "num_blocks 10^12": "UPDATE blockmaps SET num_blocks = 1000000000000",
        "runs 10^12": "UPDATE blockmaps SET runs = 1000000000000",
        "chunk n 10^12": "UPDATE event_chunks SET n = 1000000000000, id_last = 1000000000000",
        "chunk n text": "UPDATE event_chunks SET n = 'many'",
        "delta_first 10^30": layouts(lambda L: _planes_owner(L, "delta_first", 10**30)),
        "delta_first float": layouts(lambda L: _planes_owner(L, "delta_first", 1.5)),
        "offset 10^30": layouts(lambda L: _all_specs(L, "offset", 10**30)),
        "count 10^12": layouts(lambda L: _all_specs(L, "count", 10**12)),
        "nibbles wide": layouts(lambda L: _all_specs(L, "nibbles", list(range(9)))),
        "nibbles text": layouts(lambda L: _all_specs(L, "nibbles", "all")),
        "runs spec 10^12": layouts(lambda L: _all_specs(L, "runs", 10**12)),
        "layout deep": f"UPDATE blockmaps SET layout = '{DEEP}'",
        "table layout deep": f"UPDATE block_tables SET layout = '{DEEP}'",
        "summary_json deep": f"UPDATE kv_streams SET summary_json = '{DEEP}'",
        "event kind list": "UPDATE events SET kind = '[\"admitted\"]'",
        "sample lane blob": "UPDATE samples SET lane = x'00ff' WHERE sample_id = 3",
        "empty run": "DELETE FROM run",
    }
    small = bomb_mib(16)  # ~16 KB: within every blob's stored bound, inflating far past it
    empty = zlib.compress(b"") * 17  # one zlib stream more than a blob may hold
    for table, cols in BLOBS.items():
        cases[f"bomb {table}"] = set_blobs(table, cols, big_bomb)
        cases[f"multi-stream bomb {table}"] = set_blobs(table, cols, multi)
        cases[f"small bomb {table}"] = set_blobs(table, cols, small)
        cases[f"17 streams {table}"] = set_blobs(table, cols, empty)
    for table, cols in TABLES.items():
        for col in cols:
            if table != "run":
                cases[f"drop {table}.{col}"] = drop(table, col)
    return cases
