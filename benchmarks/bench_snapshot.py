"""BlockMap snapshot cost on the engine thread: the collector's 256k-block paged lane.

Builds the overhead benchmark's lane (sim mode, paged:16, 262,144 blocks, 1,024 running),
steps it into a busy state, then times `PagedAllocator.snapshot()` and the collector's whole
per-lane sample (`EngineCollector._lane_sample`) between bursts of 300 engine steps.
`python benchmarks/bench_snapshot.py [--samples 40]`; prints one JSON line (medians, ms).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kvviz.cli import build_parser  # noqa: E402
from kvviz.commands.collect import build  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=40)
    ap.add_argument("--blocks", type=int, default=262_144)
    a = ap.parse_args()
    out = Path(tempfile.mkdtemp()) / "unused.db"  # built, never opened: no writer here
    args = build_parser("collect").parse_args(
        ["collect", "--mode", "sim", "--lane", "paged:16", "--capacity-tokens",
         str(a.blocks * 16), "--rate", "inf", "--requests", "1000000", "--max-num-seqs",
         "1024", "--quiet", "--out", str(out)])
    col = build(args)
    sim = col.sim
    lane = sim.lanes[0]
    for _ in range(3000):
        sim.step(time_s=0.0)
    snap, sample = [], []
    for _ in range(a.samples):
        for _ in range(300):
            sim.step(time_s=0.0)
        t0 = time.perf_counter()
        lane.alloc.snapshot()
        t1 = time.perf_counter()
        col._lane_sample(lane, 1.0)
        t2 = time.perf_counter()
        snap.append(t1 - t0)
        sample.append(t2 - t1)
    print(json.dumps({"blocks": a.blocks, "running": int(lane.run_ids.size),
                      "snapshot_ms": round(1e3 * statistics.median(snap), 3),
                      "lane_sample_ms": round(1e3 * statistics.median(sample), 3)}))


if __name__ == "__main__":
    main()
