"""`kvviz simulate`: run a workload through one or more allocator lanes in sim mode."""
from __future__ import annotations

import argparse
import json
import math
import sys

from kvviz.commands.trace_args import (
    add_trace_arguments,
    load_trace_args,
    resolve_max_seq_len,
    trace_fields,
    trace_line,
)
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
from kvviz.errors import KvvizError
from kvviz.workload import clip_workload, dump_trace, generate

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
                     help="a trace as downloaded: Azure or BurstGPT CSV, Mooncake JSONL, or "
                          "kvviz CSV/JSONL (arrival_s, prompt_tokens, output_tokens"
                          "[, prefix_group])")
    g.add_argument("--requests", type=int, default=1000, metavar="N",
                   help="number of synthetic requests (default 1000)")
    g.add_argument("--rate", type=_rate, default=math.inf, metavar="R",
                   help="arrivals per simulated second; 'inf' = all at time 0 (default inf)")
    g.add_argument("--arrival", choices=("poisson", "bursty"), default="poisson",
                   help="inter-arrival process (bursty = gamma with shape 0.25)")
    g.add_argument("--seed", type=int, default=0, help="seed for the workload (default 0)")
    g.add_argument("--max-seq-len", type=int, default=None, metavar="N",
                   help="clip prompt+output to this and reserve it under --reserve max "
                        "(default 2048; with --trace, the trace's longest request)")
    g.add_argument("--prefix-sharing", action="store_true",
                   help="half the requests share one of 4 system prompts of --prefix-tokens; "
                        "half of those continue an earlier conversation")
    g.add_argument("--prefix-tokens", type=int, default=256, metavar="N",
                   help="length of a shared system prompt (default 256)")
    add_trace_arguments(g)


def workload_from_args(a: argparse.Namespace, show_progress: bool = False):
    """(workload clipped to the resolved max_seq_len, TraceInfo or None, max_seq_len)."""
    if a.trace:
        w, info = load_trace_args(a, a.prefix_tokens, show_progress)
        max_seq_len = resolve_max_seq_len(a.max_seq_len, w)
        return clip_workload(w, max_seq_len), info, max_seq_len
    max_seq_len = resolve_max_seq_len(a.max_seq_len, None)
    cfg = WorkloadConfig(a.workload, num_requests=a.requests, rate=a.rate, arrival=a.arrival,
                         max_seq_len=max_seq_len, prefix_share=0.5 if a.prefix_sharing else 0.0,
                         prefix_tokens=a.prefix_tokens, seed=a.seed)
    return generate(cfg), None, max_seq_len


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
    w, info, max_seq_len = workload_from_args(a, show_progress=not a.json)
    engine = EngineConfig(max_num_seqs=a.max_num_seqs, max_batched_tokens=a.max_batched_tokens,
                          watermark=a.watermark, step_ms=a.step_ms, max_seq_len=max_seq_len)
    if a.save_trace:
        save_trace(w, a.save_trace)
    sim = Simulation(w, lanes, cache, engine)
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
        r["max_seq_len"] = max_seq_len
        r.update(trace_fields(info, w))
    if a.json:
        for r in rows:
            print(json.dumps(r))
        return 0
    print(f"{len(w)} requests, capacity {a.capacity_tokens} tokens, {sim.step_no} steps "
          f"({sim.time_s:.1f} simulated s), {sim.wall_seconds:.2f} s wall")
    if info is not None:
        print(trace_line(info, w, max_seq_len))
    elif w.clipped:
        print(f"{w.clipped} requests clipped to --max-seq-len {max_seq_len}")
    print(format_table(rows))
    print("shares are time-averaged over steps with requests waiting (memory under pressure)")
    return 0


def save_trace(w, path: str) -> None:
    if w.chain_ptr is not None and path.lower().endswith(".csv"):
        raise KvvizError(f"--save-trace {path}: these requests carry hash chains, which only "
                         "kvviz's JSONL keeps; use a .jsonl name")
    dump_trace(w, path)


def format_table(rows: list[dict]) -> str:
    """One line per lane; every column as wide as its widest value (7-digit counts too)."""
    cols = [("lane", "<", lambda r: r["lane"]),
            ("used", ">", lambda r: f"{r['used_share']:.1%}"),
            ("resv", ">", lambda r: f"{r['reserved_share']:.1%}"),
            ("intern", ">", lambda r: f"{r['internal_share']:.1%}"),
            ("free", ">", lambda r: f"{r['free_share']:.1%}"),
            ("tail", ">", lambda r: f"{r['tail_waste_share']:.1%}"),
            ("extfrag", ">", lambda r: f"{r['external_frag_index_mean']:.2f}"),
            ("prefix_hit", ">", lambda r: f"{r.get('prefix_hit_rate', 0.0):.1%}"),
            ("CAP", ">", lambda r: str(r["admit_failures"]["capacity"])),
            ("FRAG", ">", lambda r: str(r["admit_failures"]["fragmentation"])),
            ("POL", ">", lambda r: str(r["admit_failures"]["policy"])),
            ("preempt", ">", lambda r: str(r["preemptions"])),
            ("steps", ">", lambda r: str(r["steps"])),
            ("clipped", ">", lambda r: str(r.get("clipped_requests", 0)))]
    cells = [[h for h, _, _ in cols]] + [[f(r) for _, _, f in cols] for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(cols))]
    lines = []
    for c in cells:
        parts = [f"{v:{al}{wd}}" for v, (_, al, _), wd in zip(c, cols, widths)]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)
