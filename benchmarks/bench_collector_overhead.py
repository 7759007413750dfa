"""Engine step rate with sampling into the store at 0 (none), 4 and 10 Hz.

One sim-mode paged lane of 256k blocks (block 16, 4M slots), a busy seeded stream, the real
collector path (EngineCollector._batch -> SampleWriter.put -> the store writer process, or
with --mode thread / inline the writer thread / the engine thread itself). Samples are due
every 1/hz s as in the collector (a late sample is not followed by a burst of catch-up
samples). Each config runs the same number of engine steps from the same start; rounds
alternate configs and the median wall time is reported. "start" is the SampleWriter's
construction (process mode: spawning the writer, which opens the file), i.e. the delay
before the first sample.

--interleave N: this VM's speed drifts by 10-40% over seconds (a fixed CPU loop varies that
much), more than the effect measured, so separate runs cannot resolve 2%. This mode runs ONE
collector and ONE writer process for N cycles of six slices (--slice s each): off, 4 Hz, off,
10 Hz, off, control (off too). Each sampled (or control) slice's step rate is compared with
the mean of its two unsampled neighbours; the median, the mean and its 95% confidence
interval over the N ratios are reported. The control shows the method's own bias and spread.
Events: in a running collector each sample carries the events of one period. Here the
events of the unsampled slices before a sampled slice would all land in its first sample (for
the 4 Hz slices, which follow off + control + off, 1.5 s of events: the writer would store 4x
the steady rate during them). So the first sample of a sampled slice carries the events of
the last period only (what was logged in the final 1/hz s of the slice before); the older ones
are skipped unstored. --keep-backlog restores the earlier behaviour (all of them).

    python benchmarks/bench_collector_overhead.py [--steps 4000] [--rounds 3] [--blocks 262144]
                                                  [--mode process|thread|inline]
    python benchmarks/bench_collector_overhead.py --interleave 100 --slice 0.5 --requests 3000000
"""
from __future__ import annotations

import argparse
import gc
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
    gc.collect()
    t0 = time.perf_counter()
    c0 = time.thread_time()
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
    cpu = time.thread_time() - c0
    sink.close("finished")
    assert sink.samples_written == samples, (sink.samples_written, samples)
    out.unlink()
    return wall, samples, in_loop, start, cpu


def interleaved(a: argparse.Namespace, tmp: Path) -> None:
    out = tmp / "interleave.db"
    args = build_parser("collect").parse_args(
        ["collect", "--mode", "sim", "--lane", "paged:16", "--capacity-tokens",
         str(a.blocks * 16), "--rate", "inf", "--requests", str(a.requests),
         "--max-num-seqs", str(a.max_num_seqs), "--quiet", "--out", str(out)])
    col = build(args)
    sink = SampleWriter(StoreSpec(out, col.meta()), mode=a.mode)
    sim = col.sim
    for _ in range(2000):  # warm up: fill the cache
        sim.step(time_s=0.0)
    # -1: a control slice, unsampled like its neighbours: its "slowdown" shows the method's
    # own spread (it should be ~0)
    plan = [0.0, 4.0, 0.0, 10.0, 0.0, -1.0] * a.interleave + [0.0]
    rates: list[float] = []
    restarts: set[int] = set()
    mark = None  # (sim, event cursor) one period of the next sampled slice before its start
    per_sample: dict[float, list[float]] = {4.0: [], 10.0: [], -1.0: [0.0]}
    t0 = time.perf_counter()
    for i, hz in enumerate(plan):
        period = 1.0 / hz if hz > 0 else float("inf")
        start = time.perf_counter()
        end, next_sample, steps = start + a.slice, start if hz > 0 else float("inf"), 0
        if hz > 0 and mark is not None and mark[0] is sim and not a.keep_backlog:
            col._cursor = max(col._cursor, mark[1])  # skip the backlog: one period's events
        nxt = plan[i + 1] if i + 1 < len(plan) else 0.0
        mark_at, mark = (end - 1.0 / nxt if nxt > 0 else float("inf")), None
        while (now := time.perf_counter()) < end:
            if mark is None and now >= mark_at:
                mark = (sim, len(sim.events))
            if now >= next_sample:
                sink.put(col._batch(now - t0))
                per_sample[hz].append(time.perf_counter() - now)
                next_sample = max(next_sample + period, now + period / 2)
            if sim.finished:  # a fresh stream; ratios touching this slice are dropped
                col.loop_no += 1
                col.sim = sim = col._new_sim()
                col._cursor = col._trimmed = 0
                for _ in range(2000):
                    sim.step(time_s=0.0)
                restarts.add(i)
            sim.step(time_s=now - t0)
            steps += 1
        rates.append(steps / (time.perf_counter() - start))
        if sys.stderr.isatty():
            print(f"\rslice {i + 1}/{len(plan)}", end="", file=sys.stderr, flush=True)
    sink.close("finished")
    for hz in (-1.0, 4.0, 10.0):
        ratios = [0.5 * (rates[i - 1] + rates[i + 1]) / rates[i] - 1
                  for i, h in enumerate(plan) if h == hz and not {i - 1, i, i + 1} & restarts]
        q = statistics.quantiles(ratios, n=4)
        mean = statistics.fmean(ratios)
        half = 1.96 * statistics.stdev(ratios) / len(ratios) ** 0.5
        name = "control" if hz < 0 else f"hz {hz:4.0f}"
        print(f"{name}: slowdown median {100 * statistics.median(ratios):+.1f}%, mean "
              f"{100 * mean:+.1f}% (95% CI of the mean {100 * (mean - half):+.1f}% to "
              f"{100 * (mean + half):+.1f}%; quartiles {100 * q[0]:+.1f}% / {100 * q[2]:+.1f}%; "
              f"{len(ratios)} slices), engine thread per sample median "
              f"{1e3 * statistics.median(per_sample[hz]):.2f} ms")
    print(f"{len(restarts)} stream restarts (slices around them dropped)")
    print(f"unsampled slices: median {statistics.median(rates[::2]):.0f} steps/s")

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
    p.add_argument("--interleave", type=int, default=0, metavar="N",
                   help="N cycles of slices off / 4 Hz / off / 10 Hz / off / control (see above)")
    p.add_argument("--slice", type=float, default=1.0, help="--interleave slice length, s")
    p.add_argument("--keep-backlog", action="store_true", help="--interleave: the first "
                   "sample of a sampled slice carries every event since the last sample")
    a = p.parse_args()
    if a.interleave:
        with tempfile.TemporaryDirectory() as d:
            interleaved(a, Path(d))
        return
    with tempfile.TemporaryDirectory() as d:
        hzs = [0.0, 4.0, 10.0]
        walls: dict[float, list[float]] = {hz: [] for hz in hzs}
        cpus: dict[float, list[float]] = {hz: [] for hz in hzs}
        counts: dict[float, int] = {}
        loop_ms: dict[float, list[float]] = {hz: [] for hz in hzs}
        starts: list[float] = []
        for r in range(a.rounds):
            for hz in hzs[r % 3:] + hzs[:r % 3]:  # rotate: no config always runs first
                w, n, in_loop, start, cpu = one(a.blocks, a.steps, hz, Path(d),
                                                a.max_num_seqs, a.mode, a.requests)
                walls[hz].append(w)
                cpus[hz].append(cpu)
                counts[hz] = n
                loop_ms[hz].append(1e3 * in_loop / max(1, n))
                starts.append(start)
        print(f"mode {a.mode}: start (SampleWriter construction) median "
              f"{statistics.median(starts):.3f} s, max {max(starts):.3f} s")
        base, base_cpu = statistics.median(walls[0.0]), statistics.median(cpus[0.0])
        lo, hi = min(walls[0.0]), max(walls[0.0])
        print(f"hz 0 wall over {a.rounds} rounds: {lo:.3f}-{hi:.3f} s (run-to-run spread "
              f"{100 * (hi / lo - 1):.1f}%)")
        for hz in hzs:
            med, cpu = statistics.median(walls[hz]), statistics.median(cpus[hz])
            print(f"hz {hz:4.0f}: {a.steps / med:8.0f} steps/s  ({counts[hz]} samples, median of "
                  f"{a.rounds}: {med:.3f} s)  slowdown {100 * (med / base - 1):+.1f}%  engine "
                  f"thread CPU {100 * (cpu / base_cpu - 1):+.1f}%, per sample "
                  f"{statistics.median(loop_ms[hz]):.2f} ms")

if __name__ == "__main__":
    main()
