"""The recording: block map encode + write cost, and a day-old recording's Live tick.

    python benchmarks/bench_store.py [maps] [--blocks 1048576] [--repeats 20] [--json]
    python benchmarks/bench_store.py soak [--samples 500000] [--repeats 5] [--json]

maps (default): encode and write time and bytes per stored block map. Maps: an engine map
  (sim run of a paged lane, block 16), a churned stress map (random admit/release rounds
  leave ~74k runs in 1M blocks), a lockstep map (a full pool whose 4,096 sequences grew one
  block each in turn, so every block is its own run: rle-zlib-2's per-plane mode), the same
  pool with its blocks in random order, plus the all-free map. "write" is one
  RunWriter.add_sample with the map plus commit (WAL, synchronous=NORMAL).
  Target: encode + write <= 10 ms for 1M blocks.
soak: a small recording made by the real collector (`kvviz collect --mode sim`, ~1,000
  sample rows, both demo lanes), then a large one whose history is the small one repeated
  back in time with SQL, all older than the last five minutes, which stay the same
  (`--samples` rows; block maps kept for every 20th copy, as retention would). On each it
  times, interleaved: every reader query the Live tick makes (`lanes`, `last_t`,
  `latest_blockmap` per lane, the headline sample, the 5-minute history, the failure feed)
  and the whole Live page run under Streamlit's AppTest (both fragments). Target: the large
  recording's tick <= 1.2x the small one's. Also times opening the Replay page on the large
  recording (target: a few seconds).
"""
from __future__ import annotations

import json
import shutil
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

import harness
import numpy as np

from kvviz.core.blockmap import BlockMap, empty_blockmap
from kvviz.core.config import CacheConfig, EngineConfig, LaneSpec, WorkloadConfig
from kvviz.core.workload import generate
from kvviz.engine import Simulation
from kvviz.engine.kvpool import KVPool
from kvviz.store.mapcodec import encode
from kvviz.store.writer import RunWriter


def engine_map(blocks: int) -> BlockMap:
    w = generate(WorkloadConfig(num_requests=40000, seed=0))
    sim = Simulation(w, [LaneSpec.parse("paged:16")], CacheConfig(capacity_tokens=blocks * 16),
                     EngineConfig(max_num_seqs=4096, max_batched_tokens=1 << 20))
    for _ in range(600):
        sim.step()
    return sim.lanes[0].snapshot()


def churned_map(blocks: int) -> BlockMap:
    rng = np.random.default_rng(0)
    a = KVPool(LaneSpec("paged", 16), blocks * 16)
    sid, live = 0, []
    for _ in range(6):
        while a.admit(sid, int(rng.lognormal(6, 1)) + 1).ok:
            live.append(sid)
            sid += 1
        rng.shuffle(live)
        for s in live[: len(live) // 2]:
            a.release(s)
        live = live[len(live) // 2:]
    return a.snapshot()


def lockstep_map(blocks: int, seqs: int = 4096, bs: int = 16) -> BlockMap:
    rng = np.random.default_rng(0)
    owner = (np.arange(blocks) % seqs).astype(np.int32)
    filled = np.full(blocks, bs, np.int32)
    filled[-seqs:] = rng.integers(1, bs + 1, seqs)
    return BlockMap(owner, filled, np.full(blocks, bs, np.int32), np.ones(blocks, np.int16),
                    np.zeros(blocks, bool), bs, 1, "paged:16", False)


def random_order_map(blocks: int) -> BlockMap:
    """The lockstep pool with its blocks shuffled: a long-running busy pool, whose free list
    hands out blocks in no particular order, looks like this (every block its own run)."""
    ls = lockstep_map(blocks)
    perm = np.random.default_rng(1).permutation(blocks)
    return BlockMap(ls.owner[perm], ls.filled[perm], ls.allocated, ls.refcount, ls.cached,
                    ls.block_size, 1, ls.label, False)


def bench_map(a, name: str, bm: BlockMap, repeats: int, tmp: Path) -> None:
    enc_t = []
    for _ in range(repeats):
        t = time.perf_counter()
        e = encode(bm)
        enc_t.append(time.perf_counter() - t)
    w = RunWriter(tmp / f"{name}.db", {}, blockmap_budget_bytes=2**40)
    wr_t = []
    for i in range(repeats):
        t = time.perf_counter()
        w.add_sample(float(i), i, "lane", {}, bm)
        w.commit()
        wr_t.append(time.perf_counter() - t)
    w.close()
    raw = sum(getattr(bm, k).nbytes for k in ("owner", "filled", "allocated", "refcount",
                                               "cached"))
    mode = json.loads(e.layout)["mode"]
    harness.emit(a, {"bench": "store", "map": name, "blocks": bm.num_blocks, "runs": e.runs,
                     "layout": mode, "encode_ms": 1e3 * statistics.median(enc_t),
                     "encode_write_ms": 1e3 * statistics.median(wr_t), "bytes": e.nbytes,
                     "raw_ratio": raw / e.nbytes},
                 f"{name:>8}: {bm.num_blocks} blocks, {e.runs} runs ({mode}), "
                 f"used {(bm.owner >= 0).mean():.0%}"
                 f" | encode {1e3 * statistics.median(enc_t):.2f} ms, encode+write+commit "
                 f"{1e3 * statistics.median(wr_t):.2f} ms (median of {repeats}) | {e.nbytes} "
                 f"bytes stored ({e.nbytes / bm.num_blocks:.3f} B/block, raw "
                 f"{raw / e.nbytes:.0f}x larger)")


def maps(a, tmp: Path) -> None:
    for name, bm in (("free", empty_blockmap(a.blocks, 16)), ("engine", engine_map(a.blocks)),
                     ("churned", churned_map(a.blocks)), ("lockstep", lockstep_map(a.blocks)),
                     ("random", random_order_map(a.blocks))):
        bench_map(a, name, bm, a.repeats, tmp)

WINDOW_S = 300.0  # older copies end before the last five minutes: those stay the small one's


def build_small(path: Path, seconds: float) -> Path:
    from kvviz.commands.cli import main

    rc = main(["collect", "--mode", "sim", "--quiet", "--steps-per-s", "200", "--hz", "20",
               "--duration", str(seconds), "--rate", "20", "--loop", "--out", str(path),
               "--lane", "contiguous:first-fit:max", "--lane", "paged:16"])
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


def soak(a, runs: Path) -> None:
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


def main() -> None:
    ap = harness.parser(__doc__, repeats=None)
    ap.add_argument("case", nargs="?", default="maps", choices=["maps", "soak"])
    ap.add_argument("--blocks", type=int, default=1 << 20, help="maps: blocks per map")
    ap.add_argument("--samples", type=int, default=500_000,
                    help="soak: the large recording's sample rows")
    ap.add_argument("--seconds", type=float, default=25.0,
                    help="soak: the small recording's length")
    a = ap.parse_args()
    a.repeats = a.repeats or {"maps": 20, "soak": 5}[a.case]
    if a.quick:
        a.blocks, a.samples, a.seconds, a.repeats = 1 << 14, 20_000, 5.0, 2
    with tempfile.TemporaryDirectory() as d:
        {"maps": maps, "soak": soak}[a.case](a, Path(d))


if __name__ == "__main__":
    main()
