"""Simulator throughput: kvviz's engine against a plain-Python loop, both sides in one run.

    python benchmarks/bench_engine.py [floor|four-lanes|million|advisor|vllm|whatif|shared]
                                      [--repeats 3] [--json]

--engine jump|step is accepted for old scripts: both run the one scheduling rule.

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

whatif: `kvviz whatif`'s work on a 10,000-request node log (sharegpt-like, 10 req/s, half
  with shared prefixes; node: block 16, 4,097 vLLM blocks = 65,536 slots, vLLM's defaults
  otherwise; the node's own record: every busy step's lists and the block tables of 300
  sampled steps, so the self-check runs in full) through the named set `sizing` (block
  16/32/64 x KV memory 0.75/1/1.25/1.5x: 12 alternatives, one equal to the node's own, plus
  the baseline = 13 runs) on all cores
  (kvviz.twin.whatif); beside it, the same 13 settings as plain Simulation.run() calls in one
  process, the engine alone without the twin's per-step reading of the pool.

shared: one prefix shared by every running request (tests/engine/test_no_wrap.py's stream):
  100,000 requests at once, prompts of 256 tokens of which 240 are one system prompt (15
  blocks of 16, each held by 1,024 running requests) and 1 output token, paged:16:prefix,
  1,024 seqs, room for all; process CPU time, medians. Step, preemption and hit totals are
  printed: a change to the rule's bookkeeping must leave them equal.

vllm: kvviz's engine against vLLM 0.32's own scheduler loop (kvviz/reference/vllm_scheduler.py
  in the venv KVVIZ_VLLM_VENV, default ~/.cache/kvviz/vllm-0.32.0), on the same streams: 1,000
  sharegpt-like requests at once (paged:16) and 1,000 with prefix sharing at 10 req/s
  (paged:16:prefix), and 1,000 of a Mooncake-shaped slice with hash chains (mooncake_like,
  paged:16:prefix); block 16, 2,048 usable blocks, 256 seqs, 8,192 batched tokens. vLLM's
  side is timed inside its process (schedule + update_from_output, no model); medians. Both
  sides' step and preemption totals are printed: they must be equal.
"""
from __future__ import annotations

import dataclasses
import json
import os
import resource
import statistics
import subprocess
import time
from collections import deque
from pathlib import Path

import harness
import numpy as np

from kvviz.core.config import LENGTH_PRESETS, CacheConfig, EngineConfig, LaneSpec, WorkloadConfig
from kvviz.core.workload import Workload, generate
from kvviz.engine import Simulation
from kvviz.runs.advisor import sweep_labels

CAPACITY = 1_000_000
NO_CAP = 1_000_000


def plain_python_loop(w: Workload, max_seqs: int, block_size: int = 16,
                      capacity: int = CAPACITY) -> int:
    """Deque free list, per-sequence block lists, FCFS admission up to `max_seqs` running,
    recompute on a failed append. Returns token appends."""
    free = deque(range(capacity // block_size))
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


def shared(a) -> None:
    seqs, prompt, prefix = 1024, 256, 240
    n = a.requests
    w = Workload(arrival_s=np.zeros(n), prompt=np.full(n, prompt, np.int64),
                 output=np.ones(n, np.int64), prefix_group=np.zeros(n, np.int64),
                 prefix_tokens=prefix)
    out: list = []

    def run() -> None:
        sim = Simulation(w, [LaneSpec.parse("paged:16:prefix")],
                         CacheConfig(capacity_tokens=seqs * (prompt + 16)),
                         EngineConfig(max_num_seqs=seqs, max_batched_tokens=seqs * prompt,
                                      max_seq_len=prompt + 1), advance=ENGINE["advance"])
        out.append(sim.run()[0])

    t = statistics.median(harness.interleaved({"kvviz": run}, a.repeats,
                                              clock=time.process_time)["kvviz"])
    s = out[-1]
    harness.emit(a, {"bench": "engine-shared-prefix", "requests": n, "seconds": t,
                     "steps": s["steps"], "preemptions": s["preemptions"],
                     "prefix_hit_rate": s["prefix_hit_rate"]},
                 f"{n:,} requests sharing 15 blocks of 16, 1,024 running: {t:.3f} s CPU; "
                 f"steps {s['steps']}, preemptions {s['preemptions']}, hit rate "
                 f"{s['prefix_hit_rate']:.6f}")


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


def whatif(a) -> None:
    from kvviz.core.config import model_preset
    from kvviz.twin import plan
    from kvviz.twin import whatif as run_whatif
    from kvviz.twin.configs import alternatives
    from kvviz.twin.runner import default_workers, run_config
    from kvviz.twin.selfcheck import RecordSpec
    from kvviz.twin.settings import NodeSettings
    from kvviz.twin.source import from_trace

    cfg = WorkloadConfig("sharegpt-like", num_requests=a.requests, rate=10.0,
                         prefix_share=0.5, seed=0)
    w = generate(cfg)
    src = from_trace(w, "bench", NodeSettings(16, 4097), model_preset("llama-3-8b"), 20.0,
                     cfg.max_seq_len)
    # the node's own record, as an attach recording gives it: every busy step's lists and the
    # block tables of 300 sampled steps (made once, untimed), so the self-check runs in full
    busy = run_config(src.stream, src.settings, RecordSpec(None, frozenset())).record.busy
    steps = np.concatenate([np.arange(x, y + 1) for x, y in busy.tolist()])
    sampled = frozenset(steps[::max(1, steps.size // 300)].tolist())
    node = run_config(src.stream, src.settings, RecordSpec(None, sampled)).record
    src = dataclasses.replace(src, node_record=node)
    alt = alternatives({}, "sizing")
    configs = plan(src, alt)
    out: list = []

    def engine_only() -> None:
        for c in configs:
            Simulation(w, [c.lane()], c.cache(src.stream.model),
                       c.engine(20.0, cfg.max_seq_len)).run()

    res = harness.interleaved({"whatif": lambda: out.append(run_whatif(src, alt)),
                               "engine": engine_only}, a.repeats)
    wi, en = statistics.median(res["whatif"]), statistics.median(res["engine"])
    base, check = out[-1].table[0], out[-1].self_check
    harness.emit(a, {"bench": "engine-whatif", "requests": a.requests, "runs": len(configs),
                     "workers": default_workers(), "whatif_s": wi, "engine_serial_s": en,
                     "baseline_steps": base["steps"],
                     "baseline_preemptions": base["preemptions"],
                     "self_check_equal": check["equal"],
                     "block_steps_compared": check["block_steps_compared"]},
                 f"whatif: {a.requests:,} requests x {len(configs)} runs on "
                 f"{default_workers()} cores: {wi:.1f} s; the same runs as Simulation.run() "
                 f"in one process: {en:.1f} s (baseline: {base['steps']:,} steps, "
                 f"{base['preemptions']:,} preemptions; self-check equal: {check['equal']}, "
                 f"{check['block_steps_compared']} sampled steps' block ids)")


def mooncake_like(n: int, seed: int) -> Workload:
    """A Mooncake-shaped slice (FAST'25's JSONL: ms timestamps, hash_ids of 512-token prompt
    blocks), read back through kvviz's trace reader: 40 conversations whose requests share
    their first 0-3 blocks, prompts up to 2,000 tokens, outputs 1-400 within 2,048 tokens,
    about 10 req/s. No
    Mooncake file is on this machine; the shape, not the data, is Mooncake's."""
    import tempfile

    from kvviz.traces import read_trace

    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(100.0, n)).astype(np.int64)  # ms
    fresh = 10_000
    rows = []
    for i in range(n):
        conv, depth = int(rng.integers(0, 40)), int(rng.integers(0, 4))
        prompt = int(rng.integers(depth * 512 + 1, 2001))
        blocks = -(-prompt // 512)
        shared = [conv * 10 + k for k in range(min(depth, blocks))]
        own = blocks - len(shared)
        ids = shared + list(range(fresh, fresh + own))
        fresh += own
        rows.append(json.dumps({"timestamp": int(t[i]), "input_length": prompt,
                                "output_length": int(rng.integers(1, min(400, 2048 - prompt) + 1)),
                                "hash_ids": ids}))
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "mooncake.jsonl"
        path.write_text("\n".join(rows) + "\n")
        w, _ = read_trace(path)
    return w


def vllm(a) -> None:
    from kvviz.engine.tokens import token_ids

    venv = Path(os.environ.get("KVVIZ_VLLM_VENV",
                               Path.home() / ".cache" / "kvviz" / "vllm-0.32.0"))
    streams = {"at once": (WorkloadConfig("sharegpt-like", num_requests=a.requests, seed=0),
                           "paged:16"),
               "prefix 10/s": (WorkloadConfig("sharegpt-like", num_requests=a.requests,
                                              rate=10.0, prefix_share=0.8, seed=0),
                               "paged:16:prefix"),
               "mooncake": (None, "paged:16:prefix")}
    root = Path(__file__).resolve().parents[1]
    for name, (cfg, lane) in streams.items():
        w = mooncake_like(a.requests, 0) if cfg is None else generate(cfg)
        step_ms = EngineConfig().step_ms
        arrive = [max(1, int(np.ceil(t * 1000.0 / step_ms))) for t in w.arrival_s.tolist()]
        case = {"block_size": 16, "num_blocks": 2048, "max_num_seqs": 256,
                "max_num_batched_tokens": 8192, "enable_chunked_prefill": True,
                "enable_prefix_caching": lane.endswith("prefix"), "watermark": 0.0,
                "max_model_len": 2048, "max_steps": 10**7, "record": False,
                "requests": [{"arrival_step": s, "prompt": int(w.prompt[i]),
                              "tokens": token_ids(w, i, int(w.prompt[i] + w.output[i]))}
                             for i, s in enumerate(arrive)]}
        p = subprocess.run([str(venv / "bin" / "python"), "-m", "kvviz.reference.vllm_scheduler"],
                           input=json.dumps({"cases": [case] * a.repeats}), text=True,
                           capture_output=True, env={**os.environ, "PYTHONPATH": str(root),
                                                     "HF_HUB_OFFLINE": "1"}, cwd="/tmp")
        if p.returncode:
            raise SystemExit(f"vLLM reference failed: {p.stderr[-2000:]}")
        ref = json.loads(p.stdout)["results"]
        ref_s = statistics.median(r["loop_seconds"] for r in ref)
        out: list = []
        kv_s = harness.median_s(lambda w=w, lane=lane, out=out: out.append(kvviz_run(
            w, [lane], 2048 * 16, 256, 8192)), a.repeats, warmup=0)
        s = out[-1][0]
        tot = ref[0]["totals"]
        harness.emit(a, {"bench": "engine-vs-vllm", "stream": name, "requests": a.requests,
                         "lane": lane, "kvviz_s": kv_s, "vllm_s": ref_s,
                         "speedup": ref_s / kv_s, "kvviz_steps": s["steps"],
                         "vllm_steps": tot["steps"], "kvviz_preemptions": s["preemptions"],
                         "vllm_preemptions": tot["preemptions"],
                         "kvviz_hit_rate": s["prefix_hit_rate"],
                         "vllm_hit_rate": ref[0]["hits"] / max(1, ref[0]["queries"])},
                     f"{name:<12} {lane:<16} kvviz {kv_s:6.3f} s, vLLM's loop {ref_s:6.2f} s "
                     f"-> {ref_s / kv_s:5.1f}x; steps {s['steps']} / {tot['steps']}, "
                     f"preemptions {s['preemptions']} / {tot['preemptions']}")


def main() -> None:
    ap = harness.parser(__doc__, repeats=3)
    ap.add_argument("case", nargs="?", default="floor", choices=["floor", "four-lanes",
                                                                  "million", "advisor", "vllm",
                                                                  "whatif", "shared"])
    ap.add_argument("--requests", type=int, default=None,
                    help="default: 10,000 (floor), 20,000 (four-lanes), 1,000,000 (million), "
                    "1,000 (advisor), 100,000 (shared)")
    ap.add_argument("--lanes", nargs="*", default=["contiguous:first-fit:max",
                                                    "contiguous:buddy:pow2"],
                    help="floor: further lanes timed for reference")
    ap.add_argument("--engine", choices=["jump", "step"], default="jump",
                    help="accepted for old scripts; both run the one scheduling rule")
    a = ap.parse_args()
    ENGINE["advance"] = a.engine
    default = {"floor": 10_000, "four-lanes": 20_000, "million": 1_000_000,
               "advisor": 1_000, "vllm": 1_000, "whatif": 10_000,
               "shared": 100_000}[a.case]
    a.requests = a.requests or (default // 20 if a.quick else default)
    {"floor": floor, "four-lanes": four_lanes, "million": million,
     "advisor": advisor, "vllm": vllm, "whatif": whatif, "shared": shared}[a.case](a)


if __name__ == "__main__":
    main()
