"""Long-run cost of the Live page: a day-old recording must cost what a fresh one does.

    python benchmarks/bench_soak.py [--samples 500000] [--repeats 5] [--json]

Builds a small recording with the real collector (`kvviz collect --mode sim`, ~1,000 sample
rows, both demo lanes), then a large one whose history is the small one repeated back in time
with SQL, all older than the last five minutes, which stay the same (`--samples` rows; block
maps kept for every 20th copy, as retention would). On each it times, interleaved: every
reader query the Live tick makes (`lanes`, `last_t`, `latest_blockmap` per lane, the
headline sample, the 5-minute history, the failure feed) and the whole Live page run under
Streamlit's AppTest (both fragments). Target: the large recording's tick <= 1.2x the small
one's. Also times opening the Replay page on the large recording (target: a few seconds).
"""
from __future__ import annotations

import shutil
import sqlite3
import statistics
import tempfile
from pathlib import Path

import harness

WINDOW_S = 300.0  # older copies end before the last five minutes: those stay the small one's


def build_small(path: Path, seconds: float) -> Path:
    from kvviz.cli import main

    rc = main(["collect", "--mode", "sim", "--quiet", "--steps-per-s", "200", "--hz", "20",
               "--duration", str(seconds), "--rate", "20", "--loop", "--out", str(path)])
    if rc != 0:
        raise SystemExit(f"collect failed ({rc})")
    return path


def _cols(conn: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in conn.execute(f"PRAGMA main.table_info({table})")]


def inflate(small: Path, large: Path, rows: int) -> int:
    """large = small's rows repeated back in time until `rows` sample rows; returns copies."""
    shutil.copy(small, large)
    conn = sqlite3.connect(large, isolation_level=None)
    conn.execute("ATTACH ? AS s", (str(small),))
    n, t0, t1, sid = conn.execute("SELECT COUNT(*), MIN(t), MAX(t), MAX(sample_id) "
                                  "FROM s.samples").fetchone()
    span = (t1 - t0) + (t1 - t0) / max(1, n)
    copies = max(1, rows // n)
    keyed = {"samples": "sample_id", "blockmaps": "sample_id", "events": "event_id",
             "device_memory": "row_id"}
    tables = [t for t in keyed if conn.execute(
        "SELECT 1 FROM s.sqlite_master WHERE name = ?", (t,)).fetchone()]
    for t in tables:
        conn.execute(f"DELETE FROM main.{t}")
    conn.execute("BEGIN")
    for k in range(copies, -1, -1):  # oldest copy first: ids grow with time
        for t in tables:
            if t == "blockmaps" and k and k % 20:
                continue
            key, cols = keyed[t], _cols(conn, t)
            top = conn.execute(f"SELECT COALESCE(MAX({key}), 0) FROM s.{t}").fetchone()[0]
            sel = [f"{c} + {(copies - k) * (top if t != 'blockmaps' else sid)}" if c == key
                   else f"t - {k * span + (WINDOW_S if k else 0)}" if c == "t" else c
                   for c in cols]
            conn.execute(f"INSERT INTO main.{t} ({', '.join(cols)}) "
                         f"SELECT {', '.join(sel)} FROM s.{t}")
    if conn.execute("SELECT 1 FROM s.sqlite_master WHERE name = 'event_chunks'").fetchone():
        conn.execute("DELETE FROM main.event_chunks")  # chunks keep their own ids; not copied
        cols = _cols(conn, "event_chunks")
        conn.execute(f"INSERT INTO main.event_chunks ({', '.join(cols)}) "
                     f"SELECT {', '.join(cols)} FROM s.event_chunks")
    conn.execute("COMMIT")
    conn.execute("DETACH s")
    conn.execute("VACUUM")
    conn.close()
    return copies


def reader_queries(path: Path):
    from kvviz.store.reader import RunReader

    def run() -> None:
        r = RunReader(path)
        try:
            lanes = r.lanes()
            last = r.last_t()
            for lane in lanes[:2]:
                r.latest_blockmap(lane)
                r.samples(lane, since_t=last - 5.0)
            r.samples(since_t=last - 300.0)
            r.events(kinds=["admit_failed"], limit=500)
        finally:
            r.close()
    return run


def live_tick(runs: Path, name: str, page: str = "live.py"):
    import logging
    import os

    os.environ["KVVIZ_RUNS_DIR"] = str(runs)
    logging.getLogger("streamlit").setLevel(logging.ERROR)  # AppTest's bare-mode warnings
    from streamlit.testing.v1 import AppTest

    def run() -> None:
        at = AppTest.from_file(str(harness.ROOT / "pages" / page), default_timeout=120)
        at.session_state["kvviz_run"] = name
        at.session_state["live_history_shown"] = True  # draw the history fragment too
        at.run()
        if at.exception:
            raise SystemExit(f"{page} failed: {at.exception[0].message}")
    return run


def main() -> None:
    ap = harness.parser(__doc__, repeats=5)
    ap.add_argument("--samples", type=int, default=500_000)
    ap.add_argument("--seconds", type=float, default=25.0, help="small recording's length")
    a = ap.parse_args()
    if a.quick:
        a.samples, a.seconds, a.repeats = 20_000, 5.0, 2
    with tempfile.TemporaryDirectory() as d:
        runs = Path(d)
        small = build_small(runs / "small.db", a.seconds)
        copies = inflate(small, runs / "large.db", a.samples)
        rows = {p: sqlite3.connect(runs / p).execute("SELECT COUNT(*) FROM samples")
                .fetchone()[0] for p in ("small.db", "large.db")}
        sizes = {p: (runs / p).stat().st_size for p in rows}
        res = harness.interleaved({"queries_small": reader_queries(runs / "small.db"),
                                   "queries_large": reader_queries(runs / "large.db"),
                                   "tick_small": live_tick(runs, "small.db"),
                                   "tick_large": live_tick(runs, "large.db"),
                                   "replay_large": live_tick(runs, "large.db", "replay.py")},
                                  a.repeats)
        med = {k: statistics.median(v) for k, v in res.items()}
        rec = {"bench": "soak", "samples_small": rows["small.db"],
               "samples_large": rows["large.db"], "copies": copies,
               "mb_small": sizes["small.db"] / 2**20, "mb_large": sizes["large.db"] / 2**20,
               **{f"{k}_ms": v * 1000 for k, v in med.items()},
               "tick_ratio": med["tick_large"] / med["tick_small"],
               "queries_ratio": med["queries_large"] / med["queries_small"]}
        harness.emit(a, rec)


if __name__ == "__main__":
    main()
