"""The documented columns and their types, checked row by row before any arithmetic.

SQLite stores any value in any column, so a hand-made or damaged file can hold text where
docs/FORMAT.md says INTEGER. A row that does not fit is a mismatch naming its table, row and
column, and is left out of the checks that need it; a missing column makes the file
unreadable (exit 2). The bounds are the ones FORMAT.md states ("Bounds").
"""
from __future__ import annotations

import math
import sqlite3

MAX_BLOCKS = 1 << 24  # blocks (or cells) of one map: kvviz refuses larger lanes
MAX_CHUNK = 1 << 24  # events of one event chunk
MAX_EVENTS = 1 << 20  # events of overlapping chunks held at once (--max-events): ~100 B each
INT64 = 1 << 63

# table -> (column, kind) for every column the verifier reads; kind: int, num, text, blob,
# and a trailing "?" for a value that may be NULL. Optional columns (older files) are marked
# with a leading "~".
COLUMNS = {
    "run": (("app", "text"), ("format_version", "int"), ("status", "text"),
            ("meta", "text"), ("blockmap_stride", "any")),
    "samples": (("sample_id", "int"), ("t", "num"), ("step", "int"), ("lane", "text")),
    "blockmaps": (("sample_id", "int"), ("lane", "text"), ("t", "any"), ("step", "any"),
                  ("idx", "int"), ("num_blocks", "int"), ("block_size", "int"),
                  ("contiguous", "int"), ("encoding", "text"), ("runs", "int"),
                  ("layout", "text"), ("lengths", "blob?"), ("owner", "blob"),
                  ("filled", "blob"), ("allocated", "blob"), ("refcount", "blob"),
                  ("cached", "blob"), ("final_seq", "blob?"), ("final_len", "blob?"),
                  ("~final_held", "blob?"), ("~buddy", "int?")),
    "events": (("event_id", "int"), ("t", "any"), ("step", "int"), ("lane", "any"),
               ("kind", "text"), ("seq_id", "int"), ("reason", "any"), ("need_tokens", "int"),
               ("free_tokens", "any")),
    "event_chunks": (("chunk_id", "int"), ("lane", "text"), ("kind", "text"), ("n", "int"),
                     ("t_first", "num"), ("t_last", "num"), ("id_first", "int"),
                     ("id_last", "int"), ("encoding", "text"), ("data", "blob")),
    "block_tables": (("sample_id", "int"), ("lane", "text"), ("encoding", "text"),
                     ("layout", "text"), ("table_len", "blob"), ("table_blocks", "blob")),
}


class Missing(Exception):
    """A documented column is not in the file."""


def columns(db: sqlite3.Connection, table: str) -> None:
    """Missing when `table` lacks a column the verifier reads."""
    have = {r[1] for r in db.execute(f"PRAGMA table_info({table})")}
    for col, _ in COLUMNS[table]:
        if not col.startswith("~") and col not in have:
            raise Missing(f"table {table} has no column {col!r}")


def _fits(v: object, kind: str) -> bool:
    if kind.endswith("?"):
        if v is None:
            return True
        kind = kind[:-1]
    if kind == "any":
        return True
    if kind == "int":
        return isinstance(v, int) and not isinstance(v, bool) and -INT64 <= v < INT64
    if kind == "num":
        return (isinstance(v, int) and not isinstance(v, bool) and -INT64 <= v < INT64) or (
            isinstance(v, float) and math.isfinite(v))
    if kind == "text":
        return isinstance(v, str)
    return isinstance(v, bytes)  # blob


def problem(table: str, row: dict) -> str | None:
    """What in `row` is not of its documented type (None when all fits)."""
    for col, kind in COLUMNS[table]:
        col = col.lstrip("~")
        if col in row and not _fits(row[col], kind):
            want = {"int": "an integer", "num": "a finite number", "text": "text",
                    "blob": "a blob"}[kind.rstrip("?")]
            return f"column {col} holds {shown(row[col])}, not {want}"
    return None


def shown(v: object, width: int = 40) -> str:
    """A stored value for a message: its type and a short repr."""
    text = repr(v)
    return f"{type(v).__name__} {text[:width]}{'...' if len(text) > width else ''}"


def map_bounds(row: dict) -> str | None:
    """A block map row whose counts FORMAT.md's bounds refuse (None when within them)."""
    n, runs, bs = row["num_blocks"], row["runs"], row["block_size"]
    if not 0 <= n <= MAX_BLOCKS:
        return f"num_blocks {n} is outside 0..{MAX_BLOCKS} (2^24, kvviz's largest lane)"
    if not 0 <= runs <= n or (n and not runs):
        return f"runs {runs} is not a count of runs of {n} blocks"
    if not 1 <= bs < 1 << 31:
        return f"block_size {bs} is outside 1..2^31 - 1"
    return None


def chunk_bounds(ch: dict) -> str | None:
    n = ch["n"]
    if not 1 <= n <= MAX_CHUNK:
        return f"n {n} is outside 1..{MAX_CHUNK}"
    if n > ch["id_last"] - ch["id_first"] + 1:
        return f"n {n} events do not fit between ids {ch['id_first']} and {ch['id_last']}"
    return None
