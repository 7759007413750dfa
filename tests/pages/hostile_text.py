"""Recordings whose names are hostile text: a lane name and KV-event endpoints carrying
Markdown (an image, a link) and HTML (an anchor), for the pages' AppTest and browser tests."""
from __future__ import annotations

import json
import sqlite3
from pathlib import Path


def lane_name(port: int) -> str:
    """Markdown that would fetch an image and show a link, and an HTML anchor."""
    return (f"![px](http://127.0.0.1:{port}/pixel.png) [Click to log in]"
            f"(http://127.0.0.1:{port}/login) <a href=\"http://127.0.0.1:{port}/a\">here</a>")


def endpoint(port: int, k: int) -> str:
    return f"<a href=\"http://127.0.0.1:{port}/ep{k}\">pod {k}</a> [md](http://127.0.0.1:{port})"


def rename_lane(path: Path, old: str, new: str) -> Path:
    """Every row and the run header of lane `old` now say `new`."""
    with sqlite3.connect(path) as db:
        for table in ("samples", "blockmaps", "events", "event_chunks", "block_tables"):
            try:
                db.execute(f"UPDATE {table} SET lane = ? WHERE lane = ?", (new, old))
            except sqlite3.OperationalError:  # a table this recording lacks
                pass
        (meta,) = db.execute("SELECT meta FROM run").fetchone()
        m = json.loads(meta)
        for lane in m.get("lanes", []):
            if lane.get("name") == old:
                lane["name"] = new
        db.execute("UPDATE run SET meta = ?", (json.dumps(m),))
    return path


def rename_endpoints(path: Path, port: int) -> Path:
    with sqlite3.connect(path) as db:
        for (sid,) in db.execute("SELECT stream_id FROM kv_streams").fetchall():
            db.execute("UPDATE kv_streams SET endpoint = ? WHERE stream_id = ?",
                       (endpoint(port, sid), sid))
    return path
