"""The collector's cost to the engine: step rate while sampling, and one sample's parts.

overhead (default): engine step rate with sampling into the store at 0 (none), 4 and 10 Hz.

One sim-mode paged lane of 256k blocks (block 16, 4M slots), a busy seeded stream, the real
collector path (EngineCollector._batch -> SampleWriter.put -> the store writer process, or
with --mode thread / inline the writer thread / the engine thread itself). Samples are due
every 1/hz s as in the collector (a late sample is not followed by a burst of catch-up
samples). Each config runs the same number of engine steps from the same start; rounds
alternate configs and the median wall time is reported. "start" is the SampleWriter's
construction (process mode: spawning the writer, which opens the file), i.e. the delay
before the first sample.

interleave: this VM's speed drifts by 10-40% over seconds (a fixed CPU loop varies that
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
are skipped unstored. --keep-backlog stores all of them instead.
audit: the pool audit's cost in real mode (CPU, tiny-cpu, or --device cuda with the
llama-3-8b shape; the default lanes
contiguous:first-fit:max and paged:16, 16,384 slots each, torch on one thread, unpaced). ONE
collector and writer process alternate slices sampled at --hz (default 4) without and with
`--audit`; each audited slice's decode step rate is compared with the mean of its two
unaudited neighbours (median, mean and 95% CI over the slices), plus the audit's own time per
sample. Target: <= 5% of decode steps/s at 4 Hz.
snapshot: the engine thread's share of one sample on the same 256k-block lane (1,024 running):
the lane's `snapshot()` and the collector's whole per-lane sample, medians over
--repeats samples taken between bursts of 300 engine steps.
owner-ids: one sample's whole cost (the engine thread's lane sample, then the writer's
metrics.compute with the slack split, block map encoding and insert) on one frozen state of
that lane, with the sequence ids as a fresh run has them and offset by --offset (default 1e8,
as a long --loop run reaches), interleaved, medians. Target: large ids <= 1.2x fresh ones.

    python benchmarks/bench_collector.py overhead [--steps 4000] [--repeats 3] [--blocks 262144]
                                         [--mode process|thread|inline]
    python benchmarks/bench_collector.py interleave [--cycles 100] [--slice 0.5]
                                         [--requests 3000000]
    python benchmarks/bench_collector.py snapshot [--repeats 40]
    python benchmarks/bench_collector.py audit [--cycles 20] [--slice 1.0] [--hz 4]
                                         [--device cpu|cuda]
    python benchmarks/bench_collector.py owner-ids [--repeats 40] [--offset 100000000]
"""
from __future__ import annotations

import argparse
import gc
import statistics
import sys
import tempfile
import time
from pathlib import Path

import harness

from collectors.launch import build
from collectors.writer_client import MODES, SampleWriter, StoreSpec
from kvviz.commands.cli import build_parser
from kvviz.settings.flags import settings_of


def one(blocks: int, steps: int, hz: float, tmp: Path, seqs: int,
        mode: str, requests: int = 20000) -> tuple[float, int, float, float]:
    out = tmp / f"bench-{hz}-{time.monotonic_ns()}.db"
    args = build_parser("collect").parse_args(
        ["collect", "--mode", "sim", "--lane", "paged:16", "--capacity-tokens",
         str(blocks * 16), "--rate", "inf", "--requests", str(requests),
         "--max-num-seqs", str(seqs),
         "--quiet", "--out", str(out)])
    col = build(settings_of(args))
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
    col = build(settings_of(args))
    sink = SampleWriter(StoreSpec(out, col.meta()), mode=a.mode)
    sim = col.sim
    for _ in range(2000):  # warm up: fill the cache
        sim.step(time_s=0.0)
    # -1: a control slice, unsampled like its neighbours: its "slowdown" shows the method's
    # own spread (it should be ~0)
    plan = [0.0, 4.0, 0.0, 10.0, 0.0, -1.0] * a.cycles + [0.0]
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
        harness.emit(a, {"bench": "collector-interleave", "hz": hz, "slices": len(ratios),
                         "slowdown_median": statistics.median(ratios), "slowdown_mean": mean,
                         "ci95": [mean - half, mean + half],
                         "per_sample_ms": 1e3 * statistics.median(per_sample[hz])},
                     f"{name}: slowdown median {100 * statistics.median(ratios):+.1f}%, mean "
                     f"{100 * mean:+.1f}% (95% CI of the mean {100 * (mean - half):+.1f}% to "
                     f"{100 * (mean + half):+.1f}%; quartiles {100 * q[0]:+.1f}% / "
                     f"{100 * q[2]:+.1f}%; {len(ratios)} slices), engine thread per sample "
                     f"median {1e3 * statistics.median(per_sample[hz]):.2f} ms")
    harness.emit(a, {"bench": "collector-interleave", "restarts": len(restarts),
                     "unsampled_steps_per_s": statistics.median(rates[::2])},
                 f"{len(restarts)} stream restarts (slices around them dropped); unsampled "
                 f"slices: median {statistics.median(rates[::2]):.0f} steps/s")


def audited(a: argparse.Namespace, tmp: Path) -> None:
    import dataclasses

    import torch

    out = tmp / "audit.db"
    args = build_parser("collect").parse_args(
        ["collect", "--mode", "real", "--device", a.device, "--rate", "inf",
         "--lane", "contiguous:first-fit:max", "--lane", "paged:16",
         "--requests", str(a.requests), "--quiet", "--out", str(out)])
    col = build(settings_of(args))  # --torch-threads 1 (the default) is applied here
    plain, audit = col.settings, dataclasses.replace(col.settings, audit=True)
    sink = SampleWriter(StoreSpec(out, col.meta()), mode=a.mode)
    sim = col.sim
    for _ in range(300):  # warm up: fill the pools
        sim.step(time_s=0.0)
    plan = [False, True] * a.cycles + [False]
    rates: list[float] = []
    per_sample: dict[bool, list[float]] = {False: [], True: []}
    restarts: set[int] = set()
    period = 1.0 / a.hz
    t0 = time.perf_counter()
    for i, on in enumerate(plan):
        col.settings = audit if on else plain
        start = time.perf_counter()
        end, next_sample, steps = start + a.slice, start, 0
        while (now := time.perf_counter()) < end:
            if now >= next_sample:
                sink.put(col._batch(now - t0))
                per_sample[on].append(time.perf_counter() - now)
                next_sample = max(next_sample + period, now + period / 2)
            if sim.finished:
                col.loop_no += 1
                col.sim = sim = col._new_sim()
                col._cursor = 0
                restarts.add(i)
            sim.step(time_s=now - t0)
            steps += 1
        rates.append(steps / (time.perf_counter() - start))
    sink.close("finished")
    ratios = [0.5 * (rates[i - 1] + rates[i + 1]) / rates[i] - 1
              for i, on in enumerate(plan) if on and not {i - 1, i, i + 1} & restarts]
    mean = statistics.fmean(ratios)
    half = 1.96 * statistics.stdev(ratios) / len(ratios) ** 0.5 if len(ratios) > 1 else 0.0
    ms = {on: 1e3 * statistics.median(v) for on, v in per_sample.items()}
    harness.emit(a, {"bench": "collector-audit", "hz": a.hz, "slices": len(ratios),
                     "device": col.resolved.device, "model": col.resolved.model.name,
                     "torch_threads": torch.get_num_threads(),
                     "steps_per_s_unaudited": statistics.median(rates[::2]),
                     "slowdown_median": statistics.median(ratios), "slowdown_mean": mean,
                     "ci95": [mean - half, mean + half], "per_sample_ms": ms[True],
                     "per_sample_ms_unaudited": ms[False], "restarts": len(restarts)},
                 f"audit at {a.hz:g} Hz: decode steps/s slowdown median "
                 f"{100 * statistics.median(ratios):+.1f}%, mean {100 * mean:+.1f}% (95% CI "
                 f"{100 * (mean - half):+.1f}% to {100 * (mean + half):+.1f}%; {len(ratios)} "
                 f"slices; unaudited {statistics.median(rates[::2]):.0f} steps/s); engine "
                 f"thread per sample {ms[True]:.2f} ms audited, {ms[False]:.2f} ms not")


def busy_lane(a: argparse.Namespace, tmp: Path):
    """A collector (built, never opened: no writer) whose one paged lane of --blocks blocks
    has run 3,000 steps of an unpaced 1M-request stream (--max-num-seqs running)."""
    args = build_parser("collect").parse_args(
        ["collect", "--mode", "sim", "--lane", "paged:16", "--capacity-tokens",
         str(a.blocks * 16), "--rate", "inf", "--requests", "1000000", "--max-num-seqs",
         str(a.max_num_seqs), "--quiet", "--out", str(tmp / "unused.db")])
    col = build(settings_of(args))
    for _ in range(3000):
        col.sim.step(time_s=0.0)
    return col


def snapshot(a: argparse.Namespace, tmp: Path) -> None:
    col = busy_lane(a, tmp)
    sim, lane = col.sim, col.sim.lanes[0]
    snap, sample = [], []
    for _ in range(a.repeats):
        for _ in range(300):
            sim.step(time_s=0.0)
        t0 = time.perf_counter()
        lane.alloc.snapshot()
        t1 = time.perf_counter()
        col._lane_sample(lane, 1.0)
        snap.append(t1 - t0)
        sample.append(time.perf_counter() - t1)
    harness.emit(a, {"bench": "collector-snapshot", "blocks": a.blocks,
                     "running": int(lane.run_ids.size),
                     "snapshot_ms": 1e3 * statistics.median(snap),
                     "lane_sample_ms": 1e3 * statistics.median(sample)})


def owner_ids(a: argparse.Namespace, tmp: Path) -> None:
    from collectors.writer_process import write_batch
    from kvviz.store.mapcodec import encode
    from kvviz.store.writer import RunWriter

    col = busy_lane(a, tmp)  # each variant writes its own recording
    lane = col.sim.lanes[0]
    parts: dict[str, dict[str, list[float]]] = {}
    maps = {}

    def variant(name: str, off: int):
        w = RunWriter(tmp / f"ids-{name}.db", col.meta())
        parts[name] = {"engine": [], "writer": []}
        col._seq_offset = off
        maps[name] = col._lane_sample(lane, 0.0).blockmap

        def run() -> None:
            col._seq_offset = off
            t0 = time.perf_counter()
            s = col._lane_sample(lane, 1.0)
            t1 = time.perf_counter()
            sid = len(parts[name]["engine"])
            write_batch(w, float(sid), [(s.step, s.lane, {"sample_id": sid, **s.counters},
                                         s.blockmap)], [], [], has_metrics=False)
            parts[name]["engine"].append(t1 - t0)
            parts[name]["writer"].append(time.perf_counter() - t1)
        return run, w

    runs = {"fresh": variant("fresh", 0), "large": variant("large", a.offset)}
    total = harness.interleaved({k: v[0] for k, v in runs.items()}, a.repeats)
    for _, w in runs.values():
        w.close()
    med = {k: 1e3 * statistics.median(v) for k, v in total.items()}
    rec: dict = {"bench": "collector-owner-ids", "blocks": a.blocks,
                 "running": int(lane.run_ids.size), "offset": a.offset, "repeats": a.repeats}
    for k in runs:
        owned = maps[k].owner[maps[k].owner >= 0]
        rec.update({f"{k}_owner_max": int(owned.max()), f"{k}_ms": med[k],
                    f"{k}_engine_ms": 1e3 * statistics.median(parts[k]["engine"][1:]),
                    f"{k}_writer_ms": 1e3 * statistics.median(parts[k]["writer"][1:]),
                    f"{k}_map_bytes": encode(maps[k]).nbytes})
    rec["ratio"] = med["large"] / med["fresh"]
    harness.emit(a, rec, f"owner ids up to {rec['fresh_owner_max']:,} vs "
                         f"{rec['large_owner_max']:,} ({rec['running']} running, {a.blocks} "
                         f"blocks): one sample {med['fresh']:.2f} vs {med['large']:.2f} ms "
                         f"(engine {rec['fresh_engine_ms']:.2f} / {rec['large_engine_ms']:.2f}, "
                         f"writer {rec['fresh_writer_ms']:.2f} / {rec['large_writer_ms']:.2f}; "
                         f"map {rec['fresh_map_bytes']} / {rec['large_map_bytes']} bytes), "
                         f"large / fresh {rec['ratio']:.2f}x (median of {a.repeats}, "
                         f"interleaved)")


def overhead(a: argparse.Namespace, tmp: Path) -> None:
    hzs = [0.0, 4.0, 10.0]
    walls: dict[float, list[float]] = {hz: [] for hz in hzs}
    cpus: dict[float, list[float]] = {hz: [] for hz in hzs}
    counts: dict[float, int] = {}
    loop_ms: dict[float, list[float]] = {hz: [] for hz in hzs}
    starts: list[float] = []
    for r in range(a.repeats):
        for hz in hzs[r % 3:] + hzs[:r % 3]:  # rotate: no config always runs first
            w, n, in_loop, start, cpu = one(a.blocks, a.steps, hz, tmp, a.max_num_seqs, a.mode,
                                            a.requests)
            walls[hz].append(w)
            cpus[hz].append(cpu)
            counts[hz] = n
            loop_ms[hz].append(1e3 * in_loop / max(1, n))
            starts.append(start)
    base, base_cpu = statistics.median(walls[0.0]), statistics.median(cpus[0.0])
    lo, hi = min(walls[0.0]), max(walls[0.0])
    harness.emit(a, {"bench": "collector-overhead", "mode": a.mode,
                     "start_s": statistics.median(starts), "spread": hi / lo - 1},
                 f"mode {a.mode}: start (SampleWriter construction) median "
                 f"{statistics.median(starts):.3f} s; hz 0 wall over {a.repeats} rounds: "
                 f"{lo:.3f}-{hi:.3f} s (run-to-run spread {100 * (hi / lo - 1):.1f}%)")
    for hz in hzs:
        med, cpu = statistics.median(walls[hz]), statistics.median(cpus[hz])
        harness.emit(a, {"bench": "collector-overhead", "hz": hz, "steps_per_s": a.steps / med,
                         "samples": counts[hz], "slowdown": med / base - 1,
                         "engine_cpu": cpu / base_cpu - 1,
                         "per_sample_ms": statistics.median(loop_ms[hz])},
                     f"hz {hz:4.0f}: {a.steps / med:8.0f} steps/s  ({counts[hz]} samples, "
                     f"median of {a.repeats}: {med:.3f} s)  slowdown {100 * (med / base - 1):+.1f}%"
                     f"  engine thread CPU {100 * (cpu / base_cpu - 1):+.1f}%, per sample "
                     f"{statistics.median(loop_ms[hz]):.2f} ms")


def main() -> None:
    p = harness.parser(__doc__, repeats=3)
    p.add_argument("case", nargs="?", default="overhead",
                   choices=["overhead", "interleave", "snapshot", "audit", "owner-ids"])
    p.add_argument("--steps", type=int, default=4000)
    p.add_argument("--blocks", type=int, default=262144)
    p.add_argument("--max-num-seqs", type=int, default=1024)
    p.add_argument("--requests", type=int, default=20000,
                   help="requests in the stream (all at t=0); more requests allow more --steps")
    p.add_argument("--mode", choices=MODES, default="process", help="where the store is "
                   "written (default: process, as `kvviz collect` does)")
    p.add_argument("--cycles", type=int, default=100,
                   help="interleave: cycles of slices off / 4 Hz / off / 10 Hz / off / control")
    p.add_argument("--slice", type=float, default=1.0, help="interleave: slice length, s")
    p.add_argument("--hz", type=float, default=4.0, help="audit: samples per second")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="audit: cpu (tiny-cpu model) or cuda (llama-3-8b shape)")
    p.add_argument("--offset", type=int, default=100_000_000,
                   help="owner-ids: added to the sequence ids of the second variant")
    p.add_argument("--keep-backlog", action="store_true", help="interleave: the first "
                   "sample of a sampled slice carries every event since the last sample")
    a = p.parse_args()
    if a.quick:
        a.steps, a.blocks, a.cycles, a.slice, a.repeats = 300, 16384, 3, 0.2, 2
    with tempfile.TemporaryDirectory() as d:
        if a.case == "audit" and not a.quick:
            a.cycles = min(a.cycles, 20) if a.cycles == 100 else a.cycles
            a.requests = a.requests if a.requests != 20000 else 4000
        {"overhead": overhead, "interleave": interleaved, "snapshot": snapshot,
         "audit": audited, "owner-ids": owner_ids}[a.case](a, Path(d))


if __name__ == "__main__":
    main()
