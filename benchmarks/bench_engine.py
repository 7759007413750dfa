"""Simulator throughput: kvviz's engine against a plain-Python loop, both sides in one run.

    python benchmarks/bench_engine.py [floor|four-lanes|million|advisor] [--engine jump|step]
                                      [--repeats 3] [--json]

--engine: kvviz's jumping engine (default) or the step-by-step reference.

floor (default): sharegpt-like, --rate inf, capacity 1M tokens, 10,000 requests; kvviz
  paged:16 (metrics and events on) against a plain-Python loop over running sequences with a
  deque free list and no metrics, on the same request stream, with vLLM's default cap of 256
  running sequences and without a cap. Rounds alternate the two sides (harness.interleaved);
  medians. Other lanes are timed once per round for reference.
four-lanes: 20,000 sharegpt-like requests at 5 req/s through contiguous:first-fit:max,
  contiguous:buddy:pow2, paged:16, paged:16:prefix at 65,536 slots (the Compare page's case).
million: 1,000,000 requests at 20 req/s, capacity 1M tokens, paged:16 and
  contiguous:buddy:pow2; wall time and peak RSS.
advisor: the Compare page's block-size advisor sweep with the page's defaults (sharegpt-like,
  1,000 requests at 20 req/s, seed 0, 16,384 slots, default engine limits): paged lanes of
  block sizes 1..256, one simulation each, as the page runs them.

A run to the end takes the lean lane (kvviz/engine/lean) where it covers the lane, so
--engine jump times the lean lane for every case here.
"""
from __future__ import annotations

import resource
import statistics
import time
from collections import deque

import harness

from kvviz.advisor import sweep_labels
from kvviz.config import LENGTH_PRESETS, CacheConfig, EngineConfig, LaneSpec, WorkloadConfig
from kvviz.engine import Simulation
from kvviz.workload import Workload, generate

CAPACITY = 1_000_000
NO_CAP = 1_000_000


def plain_python_loop(w: Workload, max_seqs: int, block_size: int = 16) -> int:
    """Deque free list, per-sequence block lists, FCFS admission up to `max_seqs` running,
    recompute on a failed append. Returns token appends."""
    free = deque(range(CAPACITY // block_size))
    waiting = deque(range(len(w)))
    prompt, output = w.prompt.tolist(), w.output.tolist()
    generated = [0] * len(w)
    running: list[list] = []  # [rid, length, blocks]
    appends = 0
    while waiting or running:
        still = []
        for seq in running:  # decode: one token each
            rid, length, blocks = seq
            if length == len(blocks) * block_size:
                if not free:
                    free.extend(blocks)
                    waiting.appendleft(rid)
                    continue
                blocks.append(free.popleft())
            seq[1] = length + 1
            generated[rid] += 1
            appends += 1
            if generated[rid] >= output[rid]:
                free.extend(blocks)
            else:
                still.append(seq)
        running = still
        while waiting and len(running) < max_seqs:  # admit FCFS
            rid = waiting[0]
            n = prompt[rid] + generated[rid]
            nb = -(-n // block_size)
            if nb > len(free):
                break
            waiting.popleft()
            running.append([rid, n, [free.popleft() for _ in range(nb)]])
    return appends


ENGINE = {"advance": "jump"}  # set from --engine


def kvviz_run(w: Workload, lanes: list[str], capacity: int, max_seqs: int,
              max_batched: int = 1_000_000_000) -> list[dict]:
    sim = Simulation(w, [LaneSpec.parse(x) for x in lanes], CacheConfig(capacity_tokens=capacity),
                     EngineConfig(max_num_seqs=max_seqs, max_batched_tokens=max_batched),
                     advance=ENGINE["advance"])
    return sim.run()


def floor(a) -> None:
    w = generate(WorkloadConfig("sharegpt-like", num_requests=a.requests, seed=0))
    appends = int(w.output.sum())
    for cap in (256, NO_CAP):
        res = harness.interleaved({
            "plain": lambda cap=cap: plain_python_loop(w, cap),
            "kvviz": lambda cap=cap: kvviz_run(w, ["paged:16"], CAPACITY, cap)}, a.repeats)
        plain, kv = statistics.median(res["plain"]), statistics.median(res["kvviz"])
        label = "256" if cap == 256 else "none"
        harness.emit(a, {"bench": "engine-floor", "cap": label, "requests": a.requests,
                         "engine": a.engine,
                         "appends": appends, "plain_s": plain, "kvviz_s": kv,
                         "plain_appends_per_s": appends / plain,
                         "kvviz_appends_per_s": appends / kv, "kvviz_speedup": plain / kv},
                     f"cap {label:>4}: plain-Python {appends / plain / 1e6:6.2f} M appends/s, "
                     f"kvviz paged:16 ({a.engine}) {appends / kv / 1e6:6.2f} M/s "
                     f"-> {plain / kv:.2f}x")
    for lane in a.lanes:
        t = harness.median_s(lambda lane=lane: kvviz_run(w, [lane], CAPACITY, NO_CAP),
                             a.repeats, warmup=0)
        harness.emit(a, {"bench": "engine-lane", "lane": lane, "cap": "none", "seconds": t,
                         "engine": a.engine,
                         "appends_per_s": appends / t},
                     f"  {lane:<28} no cap: {appends / t / 1e6:6.2f} M appends/s")


def four_lanes(a) -> None:
    w = generate(WorkloadConfig("sharegpt-like", num_requests=a.requests, rate=5.0, seed=0))
    lanes = ["contiguous:first-fit:max", "contiguous:buddy:pow2", "paged:16", "paged:16:prefix"]
    out: list = []
    t = harness.median_s(lambda: out.append(kvviz_run(w, lanes, 65_536, 256, 8192)),
                         a.repeats, warmup=0)
    harness.emit(a, {"bench": "engine-four-lanes", "requests": a.requests, "seconds": t,
                     "engine": a.engine,
                     "steps": max(s["steps"] for s in out[-1])},
                 f"{a.requests} requests x 4 lanes at 65,536 slots: {t:.2f} s "
                 f"({max(s['steps'] for s in out[-1]):,} steps)")


def million(a) -> None:
    w = generate(WorkloadConfig("sharegpt-like", num_requests=a.requests, rate=20.0, seed=0))
    t0 = time.perf_counter()
    out = kvviz_run(w, ["paged:16", "contiguous:buddy:pow2"], CAPACITY, 256, 8192)
    t = time.perf_counter() - t0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    harness.emit(a, {"bench": "engine-million", "requests": a.requests, "seconds": t,
                     "engine": a.engine,
                     "peak_rss_mb": rss, "steps": max(s["steps"] for s in out)},
                 f"{a.requests:,} requests, 2 lanes: {t:.1f} s, peak RSS {rss:.0f} MB")


def advisor(a) -> None:
    preset = next(iter(LENGTH_PRESETS))  # the page's default
    w = generate(WorkloadConfig(preset, num_requests=a.requests, rate=20.0, seed=0,
                                max_seq_len=EngineConfig().max_seq_len))
    lanes = sweep_labels()

    def sweep() -> None:
        for lane in lanes:
            Simulation(w, [LaneSpec.parse(lane)], CacheConfig(capacity_tokens=16_384),
                       EngineConfig(), advance=ENGINE["advance"]).run()

    t = harness.median_s(sweep, a.repeats, warmup=0)
    harness.emit(a, {"bench": "engine-advisor", "requests": a.requests, "seconds": t,
                     "engine": a.engine, "lanes": len(lanes)},
                 f"advisor sweep, {len(lanes)} paged lanes x {a.requests:,} requests: "
                 f"{t:.2f} s")


def main() -> None:
    ap = harness.parser(__doc__, repeats=3)
    ap.add_argument("case", nargs="?", default="floor", choices=["floor", "four-lanes",
                                                                  "million", "advisor"])
    ap.add_argument("--requests", type=int, default=None,
                    help="default: 10,000 (floor), 20,000 (four-lanes), 1,000,000 (million), "
                    "1,000 (advisor)")
    ap.add_argument("--lanes", nargs="*", default=["contiguous:first-fit:max",
                                                    "contiguous:buddy:pow2"],
                    help="floor: further lanes timed for reference")
    ap.add_argument("--engine", choices=["jump", "step"], default="jump",
                    help="kvviz engine: jump between events (default) or step one by one")
    a = ap.parse_args()
    ENGINE["advance"] = a.engine
    default = {"floor": 10_000, "four-lanes": 20_000, "million": 1_000_000,
               "advisor": 1_000}[a.case]
    a.requests = a.requests or (default // 20 if a.quick else default)
    {"floor": floor, "four-lanes": four_lanes, "million": million,
     "advisor": advisor}[a.case](a)


if __name__ == "__main__":
    main()
