"""Opening a recording for the verifier: the file's identity, its run header, its tables."""
from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from kvviz.verify import rows, trust

APP_ID = 0x6B76767A
MAX_META_DEPTH = 64  # kvviz writes 3 levels


class Unreadable(Exception):
    """Not a kvviz recording this verifier can open."""


def open_db(path: Path) -> tuple[sqlite3.Connection, int]:
    """A read-only connection inside one read transaction (a consistent snapshot, also of a
    recording whose writer is still running: WAL mode), and the format version."""
    why = trust.path_problem(path)
    if why:
        raise Unreadable(f"{path}: {why}")
    with path.open("rb") as fh:
        head = fh.read(100)
    if len(head) < 100 or not head.startswith(b"SQLite format 3\x00"):
        raise Unreadable(f"{path}: not a SQLite database")
    if int.from_bytes(head[68:72], "big") != APP_ID:
        raise Unreadable(f"{path}: application_id is not 0x6B76767A ('kvvz')")
    try:
        db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True,
                             isolation_level=None)
        db.execute("BEGIN")  # every query below reads this one snapshot
        row = db.execute("SELECT app, format_version, status, meta, blockmap_stride FROM run "
                         "WHERE id = 1").fetchone()
    except sqlite3.DatabaseError as exc:
        raise Unreadable(f"{path}: unreadable ({exc})") from None
    if row is None or row[0] != "kvviz":
        db.close()
        raise Unreadable(f"{path}: no run row with app = 'kvviz'")
    if not rows._fits(row[1], "int") or row[1] < 1:
        db.close()
        raise Unreadable(f"{path}: run.format_version holds {rows.shown(row[1])}, not a "
                         "format version")
    why = trust.version_problem(int(row[1]))
    if why:
        db.close()
        raise Unreadable(f"{path}: {why}")
    return db, int(row[1])


def tables(db: sqlite3.Connection) -> set[str]:
    return {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def meta_of(raw: object, path: Path) -> dict:
    """run.meta: a JSON object, at most MAX_META_DEPTH deep, lanes a list of objects with
    text names (Unreadable otherwise)."""
    try:
        meta = json.loads(raw) if isinstance(raw, str) else None
    except (ValueError, RecursionError):
        meta = None
    if not isinstance(meta, dict) or not isinstance(meta.get("lanes", []), list):
        raise Unreadable(f"{path}: run.meta is not the documented JSON object")
    todo, depth = [(meta, 1)], 0
    while todo:
        v, d = todo.pop()
        if isinstance(v, (dict, list)):
            depth = max(depth, d)
            if depth > MAX_META_DEPTH:
                raise Unreadable(f"{path}: run.meta is nested more than {MAX_META_DEPTH} deep")
            todo.extend((x, d + 1) for x in (v.values() if isinstance(v, dict) else v))
    for i, lane in enumerate(meta.get("lanes", [])):
        if not isinstance(lane, dict) or not isinstance(lane.get("name", ""), str):
            raise Unreadable(f"{path}: run.meta lanes[{i}] is not an object with a text name")
    return meta
