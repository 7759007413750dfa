"""`kvviz simulate`: run a workload through one or more allocator lanes in sim mode."""
from __future__ import annotations

import argparse
import json
import math
import sys

from kvviz.config import (
    LENGTH_PRESETS,
    MODEL_PRESETS,
    PLACEMENTS,
    RESERVE_POLICIES,
    CacheConfig,
    EngineConfig,
    LaneSpec,
    WorkloadConfig,
    model_preset,
)
from kvviz.engine import Simulation
from kvviz.workload import dump_trace, generate, load_trace

HELP = "simulate allocators on a synthetic workload or a trace (sim mode, no tensors)"


def _rate(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a number: {text!r} (use 'inf' for all at once)") from None
    if not v > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return v


def add_workload_arguments(p: argparse.ArgumentParser) -> None:
    """Workload flags shared by simulate and collect."""
    g = p.add_argument_group("workload")
    src = g.add_mutually_exclusive_group()
    src.add_argument("--workload", default="sharegpt-like", metavar="PRESET",
                     help=f"length preset: {', '.join(LENGTH_PRESETS)} (default sharegpt-like)")
    src.add_argument("--trace", metavar="FILE",
                     help="CSV or JSONL trace: arrival_s, prompt_tokens, output_tokens"
                          "[, prefix_group]")
    g.add_argument("--requests", type=int, default=1000, metavar="N",
                   help="number of synthetic requests (default 1000)")
    g.add_argument("--rate", type=_rate, default=math.inf, metavar="R",
                   help="arrivals per simulated second; 'inf' = all at time 0 (default inf)")
    g.add_argument("--arrival", choices=("poisson", "bursty"), default="poisson",
                   help="inter-arrival process (bursty = gamma with shape 0.25)")
    g.add_argument("--seed", type=int, default=0, help="seed for the workload (default 0)")
    g.add_argument("--max-seq-len", type=int, default=2048, metavar="N",
                   help="clip prompt+output to this and reserve it under --reserve max "
                        "(default 2048)")
    g.add_argument("--prefix-sharing", action="store_true",
                   help="half the requests share one of 4 system prompts of --prefix-tokens")
    g.add_argument("--prefix-tokens", type=int, default=256, metavar="N",
                   help="length of a shared system prompt (default 256)")


def workload_from_args(a: argparse.Namespace):
    if a.trace:
        return load_trace(a.trace, max_seq_len=a.max_seq_len, prefix_tokens=a.prefix_tokens)
    cfg = WorkloadConfig(a.workload, num_requests=a.requests, rate=a.rate, arrival=a.arrival,
                         max_seq_len=a.max_seq_len, prefix_share=0.5 if a.prefix_sharing else 0.0,
                         prefix_tokens=a.prefix_tokens, seed=a.seed)
    return generate(cfg)


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("allocator (one lane; or use --lane, repeatable)")
    g.add_argument("--allocator", choices=("contiguous", "paged"), default="paged",
                   help="paged (default) or contiguous")
    g.add_argument("--placement", choices=PLACEMENTS, default="first-fit",
                   help="contiguous placement (default first-fit)")
    g.add_argument("--reserve", choices=RESERVE_POLICIES, default="max",
                   help="contiguous reservation: max = max_seq_len, pow2 = next power of two "
                        "of prompt+output, exact = prompt+output (an oracle) (default max)")
    g.add_argument("--block-size", type=int, default=16, metavar="N",
                   help="paged block size in tokens (default 16)")
    g.add_argument("--lane", action="append", metavar="SPEC", default=None,
                   help="a lane: contiguous:PLACEMENT:RESERVE or paged:BLOCK[:prefix]; "
                        "repeat to compare lanes over one request stream")
    c = p.add_argument_group("cache and engine")
    c.add_argument("--capacity-tokens", type=int, default=1 << 20, metavar="N",
                   help="KV capacity in token slots (default 1048576)")
    c.add_argument("--model", default="llama-3-8b", metavar="PRESET",
                   help=f"model shape for bytes per token: {', '.join(MODEL_PRESETS)}")
    c.add_argument("--step-ms", type=float, default=20.0, metavar="MS",
                   help="simulated time per engine step (default 20)")
    c.add_argument("--max-num-seqs", type=int, default=256, metavar="N",
                   help="running-batch limit (default 256)")
    c.add_argument("--max-batched-tokens", type=int, default=8192, metavar="N",
                   help="prefill tokens per step (default 8192)")
    c.add_argument("--watermark", type=float, default=0.01,
                   help="share of capacity kept free when admitting into paged lanes "
                        "(default 0.01)")
    c.add_argument("--engine", choices=("jump", "step"), default="jump",
                   help="jump between events (default; exact, falls back to stepping for "
                        "prefix-caching lanes) or step one engine step at a time (reference)")
    add_workload_arguments(p)
    o = p.add_argument_group("output")
    o.add_argument("--json", action="store_true", help="one JSON object per lane, one per line")
    o.add_argument("--save-trace", metavar="FILE",
                   help="also write the request stream as a trace (.csv or .jsonl)")


def lanes_from_args(a: argparse.Namespace) -> list[LaneSpec]:
    if a.lane:
        return [LaneSpec.parse(s) for s in a.lane]
    if a.allocator == "paged":
        return [LaneSpec("paged", a.block_size)]
    return [LaneSpec("contiguous", 1, placement=a.placement, reserve=a.reserve)]


def run(a: argparse.Namespace) -> int:
    lanes = lanes_from_args(a)
    cache = CacheConfig(block_size=max(s.block_size for s in lanes),
                        capacity_tokens=a.capacity_tokens, model=model_preset(a.model))
    engine = EngineConfig(max_num_seqs=a.max_num_seqs, max_batched_tokens=a.max_batched_tokens,
                          watermark=a.watermark, step_ms=a.step_ms, max_seq_len=a.max_seq_len)
    w = workload_from_args(a)
    if a.save_trace:
        dump_trace(w, a.save_trace)
    sim = Simulation(w, lanes, cache, engine, advance=a.engine)
    show = sys.stderr.isatty() and not a.json

    def progress(done: int, total: int) -> None:
        if show:
            bar = "#" * int(30 * done / total)
            print(f"\r[{bar:<30}] {done}/{total} requests", end="", file=sys.stderr, flush=True)

    rows = sim.run(progress=progress)
    if show:
        print(file=sys.stderr)
    for r in rows:
        r["requests"] = len(w)
        r["simulated_seconds"] = sim.time_s
    if a.json:
        for r in rows:
            print(json.dumps(r))
        return 0
    print(f"{len(w)} requests, capacity {a.capacity_tokens} tokens, {sim.step_no} steps "
          f"({sim.time_s:.1f} simulated s), {sim.wall_seconds:.2f} s wall")
    print(format_table(rows))
    return 0


SHARE_COLS = ("used", "reserved", "internal", "free")
FOOTER = ("Shares of KV capacity, time-averaged over the lane's steps. 'all steps': every step. "
          "'memory pressure': only steps\nwhere the head-of-line request was refused for memory "
          "(CAPACITY or FRAGMENTATION) or a sequence was preempted;\nwaiting for the batch "
          "limit or the prefill token budget with memory free is not memory pressure.")


def _share_cells(shares: dict, tail: float, efi: float) -> str:
    return ("".join(f"{shares[k]:>7.1%}" for k in SHARE_COLS)
            + f"{tail:>7.1%}{efi:>8.2f}")


def format_table(rows: list[dict]) -> str:
    """The per-lane table: counts, shares over all steps and over memory-pressure steps."""
    lines = [f"{'lane / averaged over':<26}{'steps':>18}{'used':>7}{'resv':>7}{'intern':>7}"
             f"{'free':>7}{'tail':>7}{'extfrag':>8}{'CAP':>6}{'FRAG':>6}{'POL':>6}{'preempt':>8}"]
    for r in rows:
        f = r["admit_failures"]
        every = r["all_steps_shares"]
        lines.append(r["lane"])
        lines.append(f"{'  all steps':<26}{r['steps']:>18}"
                     + _share_cells(every, every["tail_waste"], every["external_frag_index"])
                     + f"{f['capacity']:>6}{f['fragmentation']:>6}{f['policy']:>6}"
                       f"{r['preemptions']:>8}")
        n = r["pressure_steps"]
        if not n:
            lines.append(f"{'  memory pressure':<26}{0:>18}  never under memory pressure")
            continue
        frac = f"{n} ({n / max(1, r['steps']):.1%})"
        pressure = {k: r[f"{k}_share"] for k in SHARE_COLS}
        lines.append(f"{'  memory pressure':<26}{frac:>18}" + _share_cells(
            pressure, r["tail_waste_share"], r["external_frag_index_mean"]))
    lines.append(FOOTER)
    return "\n".join(lines)
