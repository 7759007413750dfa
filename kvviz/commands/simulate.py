"""`kvviz simulate`: run a workload through one or more allocator lanes in sim mode.

Every lane runs vLLM 0.32's scheduling rule (kvviz/engine/rule/scheduler.py, docs/FIDELITY.md);
contiguous lanes and their placements and reservations are kvviz's own (vLLM has none).
"""
from __future__ import annotations

import argparse
import json
import sys

from kvviz.core import limits as at
from kvviz.core import safeio
from kvviz.core.config import (
    DEFAULT_LANES,
    LENGTH_PRESETS,
    MODEL_HELP,
    PLACEMENTS,
    RESERVE_POLICIES,
    CacheConfig,
    EngineConfig,
    LaneSpec,
    WorkloadConfig,
    check_lane_blocks,
    model_for,
)
from kvviz.core.errors import KvvizError
from kvviz.core.workload import clip_workload, dump_trace, generate, is_kvviz_trace
from kvviz.engine import Simulation
from kvviz.settings import memory
from kvviz.settings.collector import MEMORY_BUDGET_MB
from kvviz.traces.args import (
    add_trace_arguments,
    load_trace_args,
    resolve_max_seq_len,
    trace_fields,
    trace_line,
)

HELP = ("simulate allocators on a synthetic workload or a trace (sim mode, no tensors); "
        "every lane is scheduled by vLLM 0.32's rules, contiguous lanes are kvviz's own model")
STEP_MS = at.float_range(0.0, 1e6, lo_open=True)


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
    g.add_argument("--requests", type=at.REQUESTS, default=1000, metavar="N",
                   help=at.rng("number of synthetic requests (default 1000)", at.REQUESTS))
    g.add_argument("--rate", type=at.RATE, default=at.DEFAULT_RATE, metavar="R",
                   help=at.rng(at.RATE_HELP, at.RATE))
    g.add_argument("--arrival", choices=("poisson", "bursty"), default="poisson",
                   help="inter-arrival process (bursty = gamma with shape 0.25)")
    g.add_argument("--seed", type=at.SEED, default=0,
                   help=at.rng("seed for the workload (default 0)", at.SEED))
    g.add_argument("--max-seq-len", type=at.MAX_SEQ_LEN, default=None, metavar="N",
                   help=at.rng("clip prompt+output to this and reserve it under --reserve max "
                               "(default 2048; with --trace, the trace's longest request)",
                               at.MAX_SEQ_LEN))
    g.add_argument("--prefix-sharing", type=at.SHARE, nargs="?", const=at.PREFIX_SHARE_BARE,
                   default=0.0, metavar="SHARE", help=at.rng(
                       at.PREFIX_SHARING_HELP + "; --prefix-tokens long", at.SHARE))
    g.add_argument("--prefix-tokens", type=at.PREFIX_TOKENS, default=256, metavar="N",
                   help=at.rng("length of a shared system prompt (default 256)",
                               at.PREFIX_TOKENS))
    add_trace_arguments(g)


def workload_from_args(a: argparse.Namespace, show_progress: bool = False):
    """(workload clipped to the resolved max_seq_len, TraceInfo or None, max_seq_len)."""
    if a.trace:
        w, info = load_trace_args(a, a.prefix_tokens, show_progress)
        max_seq_len = resolve_max_seq_len(a.max_seq_len, w)
        return clip_workload(w, max_seq_len), info, max_seq_len
    max_seq_len = resolve_max_seq_len(a.max_seq_len, None)
    cfg = WorkloadConfig(a.workload, num_requests=a.requests, rate=a.rate, arrival=a.arrival,
                         max_seq_len=max_seq_len, prefix_share=a.prefix_sharing,
                         prefix_tokens=a.prefix_tokens, seed=a.seed)
    return generate(cfg), None, max_seq_len


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("allocator lanes (--lane, repeatable; or one lane described by "
                             "--allocator, --placement, --reserve, --block-size instead of the "
                             "default lanes). Paged lanes are vLLM's block manager; contiguous "
                             "lanes (placement, reservation) are kvviz's own model, not in vLLM")
    g.add_argument("--lane", action="append", metavar="SPEC", default=None, help=at.LANE_HELP)
    g.add_argument("--allocator", choices=("contiguous", "paged"), default=None,
                   help="one lane of this kind instead of the default lanes (paged when only "
                        "--block-size is given, contiguous when --placement or --reserve is)")
    g.add_argument("--placement", choices=PLACEMENTS, default=None,
                   help="the one contiguous lane's placement (first-fit when not given)")
    g.add_argument("--reserve", choices=RESERVE_POLICIES, default=None,
                   help="the one contiguous lane's reservation: max = max_seq_len, pow2 = next "
                        "power of two of prompt+output, exact = prompt+output (an oracle) (max "
                        "when not given)")
    g.add_argument("--block-size", type=at.BLOCK_SIZE, default=None, metavar="N",
                   help=at.rng("the one paged lane's block size in tokens (16 when not given)",
                               at.BLOCK_SIZE))
    c = p.add_argument_group("cache and engine")
    c.add_argument("--capacity-tokens", type=at.CAPACITY_TOKENS,
                   default=at.DEFAULT_CAPACITY_TOKENS, metavar="N",
                   help=at.rng(at.CAPACITY_TOKENS_HELP, at.CAPACITY_TOKENS))
    c.add_argument("--model", default=None, metavar="PRESET", help=MODEL_HELP)
    c.add_argument("--step-ms", type=STEP_MS, default=20.0, metavar="MS",
                   help=at.rng("simulated time per engine step (default 20)", STEP_MS))
    c.add_argument("--max-num-seqs", type=at.MAX_NUM_SEQS, default=256, metavar="N",
                   help=at.rng(at.MAX_NUM_SEQS_HELP, at.MAX_NUM_SEQS))
    c.add_argument("--max-num-batched-tokens", "--max-batched-tokens", dest="max_batched_tokens",
                   type=at.BATCHED_TOKENS, default=8192, metavar="N",
                   help=at.rng(at.BATCHED_TOKENS_HELP, at.BATCHED_TOKENS))
    c.add_argument("--enable-chunked-prefill", action=argparse.BooleanOptionalAction,
                   default=True, help=at.CHUNKED_PREFILL_HELP)
    c.add_argument("--enable-prefix-caching", action="store_true",
                   help="one paged lane that caches every full block by its content (the "
                        "lane spec paged:N:prefix does the same); off by default here, on in "
                        "vLLM")
    c.add_argument("--memory-budget-mb", type=MEMORY_BUDGET_MB, default=None, metavar="MB",
                   help=at.rng("memory the whole run may take (every lane's blocks, the "
                               "requests), checked before the simulation starts (default: 80%% "
                               "of the memory available now)", MEMORY_BUDGET_MB))
    c.add_argument("--watermark", type=at.WATERMARK, default=0.0,
                   help=at.rng(at.WATERMARK_HELP, at.WATERMARK))
    c.add_argument("--engine", choices=("jump", "step"), default="jump",
                   help="kept for scripts: both step the one scheduling rule (vLLM 0.32's, "
                        "docs/FIDELITY.md) and skip idle time")
    add_workload_arguments(p)
    o = p.add_argument_group("output")
    o.add_argument("--json", action="store_true", help="one JSON object per lane, one per line")
    o.add_argument("--save-trace", metavar="FILE",
                   help="also write the request stream as a trace (.csv or .jsonl); an "
                        "existing file is refused unless --overwrite")
    o.add_argument("--overwrite", action="store_true",
                   help="let --save-trace replace an existing kvviz trace (or empty file); "
                        "any other file is never replaced")


ONE_LANE = ("allocator", "placement", "reserve", "block_size")  # flags that describe one lane


def lanes_from_args(a: argparse.Namespace) -> list[LaneSpec]:
    """--lane's lanes; else the one lane --allocator & co. (or --enable-prefix-caching)
    describe; else the default lanes (collect's too)."""
    if a.lane:
        return [LaneSpec.parse(s) for s in a.lane]
    if all(getattr(a, f) is None for f in ONE_LANE) and not a.enable_prefix_caching:
        return list(DEFAULT_LANES)
    kind = a.allocator or ("contiguous" if a.placement or a.reserve else "paged")
    if kind == "paged":
        return [LaneSpec("paged", a.block_size or 16, prefix_caching=a.enable_prefix_caching)]
    return [LaneSpec("contiguous", 1, placement=a.placement or "first-fit",
                     reserve=a.reserve or "max")]


def run(a: argparse.Namespace) -> int:
    lanes = lanes_from_args(a)
    check_lane_blocks(lanes, a.capacity_tokens)
    save = None
    if a.save_trace is not None:
        save = safeio.check_output(a.save_trace, "--save-trace", overwrite=a.overwrite,
                                   is_ours=is_kvviz_trace, kind_name="kvviz trace")
    cache = CacheConfig(a.capacity_tokens, model_for(a.model, real_on_cpu=False))
    if not a.trace:  # before the workload is generated; a trace is counted once read
        memory.check(memory.need(lanes, a.capacity_tokens, a.requests), a.memory_budget_mb)
    w, info, max_seq_len = workload_from_args(a, show_progress=not a.json)
    try:
        engine = EngineConfig(max_num_seqs=a.max_num_seqs, max_batched_tokens=a.max_batched_tokens,
                              watermark=a.watermark, step_ms=a.step_ms, max_seq_len=max_seq_len,
                              enable_chunked_prefill=a.enable_chunked_prefill)
    except ValueError as exc:
        raise KvvizError("--max-num-batched-tokens: " + str(exc).split(": ", 1)[-1]) from None
    memory.check(memory.need(lanes, a.capacity_tokens, len(w)), a.memory_budget_mb)
    if save is not None:
        save_trace(w, str(save))
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
        r["simulated_seconds"] = r["steps"] * a.step_ms / 1000.0  # this lane's own steps
        r["max_seq_len"] = max_seq_len
        r.update(trace_fields(info, w))
    if a.json:
        for r in rows:
            print(json.dumps(r))
        return 0
    print(f"{len(w)} requests, capacity {a.capacity_tokens} tokens; the last lane finished "
          f"after {sim.step_no} steps ({sim.time_s:.1f} simulated s; each lane's own steps "
          f"below), {sim.wall_seconds:.2f} s wall")
    if info is not None:
        print(trace_line(info, w, max_seq_len))
    elif w.clipped:
        print(f"{w.clipped} requests clipped to --max-seq-len {max_seq_len}")
    print(format_table(rows))
    return 0


def save_trace(w, path: str) -> None:
    if w.chain_ptr is not None and path.lower().endswith(".csv"):
        raise KvvizError(f"--save-trace {path}: these requests carry hash chains, which only "
                         "kvviz's JSONL keeps; use a .jsonl name")
    dump_trace(w, path)


SHARE_COLS = ("used", "reserved", "internal", "free")
FOOTER = ("Shares of KV capacity, time-averaged over the lane's steps. 'all steps': every step. "
          "'memory pressure': only steps\nwhere the head-of-line request was refused for memory "
          "(CAPACITY or FRAGMENTATION) or a sequence was preempted;\nwaiting for the batch "
          "limit or the prefill token budget with memory free is not memory pressure.")


COUNTS = (("CAP", lambda r: r["admit_failures"]["capacity"]),
          ("FRAG", lambda r: r["admit_failures"]["fragmentation"]),
          ("POL", lambda r: r["admit_failures"]["policy"]),
          ("preempt", lambda r: r["preemptions"]),
          ("clipped", lambda r: r.get("clipped_requests", 0)))


def _share_cells(shares: dict, tail: float, efi: float) -> str:
    return ("".join(f"{shares[k]:>7.1%}" for k in SHARE_COLS)
            + f"{tail:>7.1%}{efi:>8.2f}")


def format_table(rows: list[dict]) -> str:
    """Two lines per lane: shares over all steps and over memory-pressure steps, with the
    prefix hit rate and the counts; every count column as wide as its widest value."""
    cw = {k: 2 + max([len(k), *(len(str(f(r))) for r in rows)]) for k, f in COUNTS}
    sw = 2 + max([len("steps"), *(len(f"{r['steps']} (100.0%)") for r in rows)])
    lines = [f"{'lane / averaged over':<26}{'steps':>{sw}}{'used':>7}{'resv':>7}{'intern':>7}"
             f"{'free':>7}{'tail':>7}{'extfrag':>8}{'prefix':>8}"
             + "".join(f"{k:>{cw[k]}}" for k, _ in COUNTS)]
    for r in rows:
        every = {k: r[f"{k}_share"] for k in SHARE_COLS}
        lines.append(r["lane"])
        lines.append(f"{'  all steps':<26}{r['steps']:>{sw}}"
                     + _share_cells(every, r["tail_waste_share"], r["external_frag_index_mean"])
                     + f"{r.get('prefix_hit_rate', 0.0):>8.1%}"
                     + "".join(f"{f(r):>{cw[k]}}" for k, f in COUNTS))
        n = r["pressure_steps"]
        if not n:
            lines.append(f"{'  memory pressure':<26}{0:>{sw}}  never under memory pressure")
            continue
        frac = f"{n} ({n / max(1, r['steps']):.1%})"
        p = r["pressure_step_shares"]
        lines.append(f"{'  memory pressure':<26}{frac:>{sw}}" + _share_cells(
            p, p["tail_waste"], p["external_frag_index"]))
    lines.append(FOOTER)
    return "\n".join(lines)
