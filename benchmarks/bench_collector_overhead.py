"""Engine step rate with sampling into the store at 0 (none), 4 and 10 Hz.

One sim-mode paged lane of 256k blocks (block 16, 4M slots), a busy seeded stream, the real
collector path (EngineCollector._batch -> SampleWriter.put -> the store writer process, or
with --mode thread / inline the writer thread / the engine thread itself). Samples are due
every 1/hz s as in the collector (a late sample is not followed by a burst of catch-up
samples). Each config runs the same number of engine steps from the same start; rounds
alternate configs and the median wall time is reported. "start" is the SampleWriter's
construction (process mode: spawning the writer, which opens the file), i.e. the delay
before the first sample.

    python benchmarks/bench_collector_overhead.py [--steps 4000] [--rounds 3] [--blocks 262144]
                                                  [--mode process|thread|inline]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from collectors.sampler import MODES, SampleWriter, StoreSpec  # noqa: E402
from kvviz.cli import build_parser  # noqa: E402
from kvviz.commands.collect import build  # noqa: E402


def one(blocks: int, steps: int, hz: float, tmp: Path, seqs: int,
        mode: str, requests: int = 20000) -> tuple[float, int, float, float]:
    out = tmp / f"bench-{hz}-{time.monotonic_ns()}.db"
    args = build_parser("collect").parse_args(
        ["collect", "--mode", "sim", "--lane", "paged:16", "--capacity-tokens",
         str(blocks * 16), "--rate", "inf", "--requests", str(requests),
         "--max-num-seqs", str(seqs),
         "--quiet", "--out", str(out)])
    col = build(args)
    ts = time.perf_counter()
    sink = SampleWriter(StoreSpec(out, col.meta()), mode=mode)
    start = time.perf_counter() - ts
    sim = col.sim
    period = 1.0 / hz if hz else float("inf")
    t0 = time.perf_counter()
    next_sample, samples, in_loop = period, 0, 0.0
    for _ in range(steps):
        now = time.perf_counter() - t0
        if hz and now >= next_sample:
            ts = time.perf_counter()
            sink.put(col._batch(now))
            in_loop += time.perf_counter() - ts
            samples += 1
            next_sample = max(next_sample + period, now + period / 2)
        sim.step(time_s=now)
    wall = time.perf_counter() - t0
    sink.close("finished")
    assert sink.samples_written == samples, (sink.samples_written, samples)
    out.unlink()
    return wall, samples, in_loop, start


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=4000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--blocks", type=int, default=262144)
    p.add_argument("--max-num-seqs", type=int, default=1024)
    p.add_argument("--requests", type=int, default=20000,
                   help="requests in the stream (all at t=0); more requests allow more --steps")
    p.add_argument("--mode", choices=MODES, default="process", help="where the store is "
                   "written (default: process, as `kvviz collect` does)")
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as d:
        walls: dict[float, list[float]] = {0.0: [], 4.0: [], 10.0: []}
        counts: dict[float, int] = {}
        loop_ms: dict[float, list[float]] = {hz: [] for hz in walls}
        starts: list[float] = []
        for _ in range(a.rounds):
            for hz in walls:
                w, n, in_loop, start = one(a.blocks, a.steps, hz, Path(d), a.max_num_seqs,
                                           a.mode, a.requests)
                walls[hz].append(w)
                counts[hz] = n
                loop_ms[hz].append(1e3 * in_loop / max(1, n))
                starts.append(start)
        print(f"mode {a.mode}: start (SampleWriter construction) median "
              f"{statistics.median(starts):.3f} s, max {max(starts):.3f} s")
        base = statistics.median(walls[0.0])
        for hz, ws in walls.items():
            med = statistics.median(ws)
            print(f"hz {hz:4.0f}: {a.steps / med:8.0f} steps/s  ({counts[hz]} samples, median of "
                  f"{a.rounds}: {med:.3f} s)  slowdown {100 * (med / base - 1):+.1f}%  engine "
                  f"thread per sample {statistics.median(loop_ms[hz]):.2f} ms")


if __name__ == "__main__":
    main()
