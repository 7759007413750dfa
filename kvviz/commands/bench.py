"""`kvviz bench attention|real`: decode-attention and real-mode benchmarks (needs torch)."""
from __future__ import annotations

import argparse
import json
import math
import sys

from kvviz.core import limits as at

HELP = "benchmark paged vs contiguous decode attention, or real-mode decode steps"
DTYPES = ("float32", "bfloat16", "float16")
BACKENDS = ("auto", "torch", "numba", "triton")  # kvviz.kv.attention.BACKENDS and "auto"
MIN_REPEATS = 20
BATCH = at.int_range(1, 4096)
CONTEXT = at.int_range(2, 2**20)
HEADS = at.int_range(1, 1024)
HEAD_DIM = at.int_range(1, 1024)
REPEATS = at.int_range(MIN_REPEATS, 10**6)
WARMUP = at.int_range(0, 10**6)
STEPS = at.int_range(1, 10**7)
ROUNDS = at.int_range(1, 1000)
NOISY_SPREAD = 0.25  # kvviz.kv.bench.NOISY_SPREAD (not imported: this module stays torch-free)


def _n(p: argparse.ArgumentParser, flag: str, typ, default, help_text: str = "") -> None:
    p.add_argument(flag, type=typ, default=default, help=at.rng(help_text, typ))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="bench_what", metavar="WHAT", parser_class=type(parser))
    parser.set_defaults(_bench_parser=parser)

    a = sub.add_parser("attention", help="paged vs contiguous decode attention, same K/V",
                       description="Time paged vs contiguous decode attention over the same "
                       "K/V: median, p10-p90 and spread of --repeats runs after warm-up (x "
                       "--rounds for a sweep), and the torch thread count; a warning when the "
                       "spread is over 25% of the median. ratio = paged/contiguous, "
                       "gbps = K/V bytes read / paged time.")
    a.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    _n(a, "--batch", BATCH, 16)
    _n(a, "--context", CONTEXT, 1024, "tokens per sequence")
    _n(a, "--heads", HEADS, 8, "query heads")
    _n(a, "--kv-heads", HEADS, 8)
    _n(a, "--head-dim", HEAD_DIM, 128)
    _n(a, "--block-size", at.BLOCK_SIZE, 16)
    a.add_argument("--dtype", choices=DTYPES, default="float32")
    a.add_argument("--backend", choices=BACKENDS, default="auto",
                   help="paged path backend (auto: numba on CPU, triton on CUDA)")
    a.add_argument("--contiguous-backend", choices=BACKENDS, default="torch",
                   help="baseline backend (default torch: SDPA over contiguous K/V); when it "
                   "differs from the paged one, the contiguous layout is also timed through "
                   "the paged backend (indirection = paged / that)")
    _n(a, "--repeats", REPEATS, MIN_REPEATS, "timed runs")
    _n(a, "--warmup", WARMUP, 3)
    a.add_argument("--sweep-block-sizes", action="store_true",
                   help="one result per block size 1, 2, 4, ..., 256")
    _n(a, "--rounds", ROUNDS, 1, "times the whole sweep runs; each block size's runs are "
       "pooled, so a burst of load hits one round, not all its runs")
    _common(a)

    r = sub.add_parser("real", help="RealKV decode steps per second",
                       description="Decode steps per second of real mode (RealKV with a real "
                       "allocator) over a full running batch; prefill time is not counted.")
    r.add_argument("--model", default="tiny-cpu")
    _n(r, "--seqs", BATCH, 64, "running sequences")
    _n(r, "--context", CONTEXT, 300, "typical length (start ~U[c/2, 3c/2])")
    _n(r, "--steps", STEPS, 200)
    _n(r, "--duration", at.SECONDS, None, "seconds (overrides --steps)")
    r.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    r.add_argument("--allocator", choices=("paged", "contiguous"), default="paged")
    _n(r, "--block-size", at.BLOCK_SIZE, 16)
    r.add_argument("--backend", choices=BACKENDS, default="auto")
    r.add_argument("--dtype", choices=DTYPES, default=None, help="default: the model's")
    _common(r)


def _common(p: argparse.ArgumentParser) -> None:
    _n(p, "--threads", at.THREADS, None, "torch CPU threads")
    _n(p, "--seed", at.SEED, 0)
    p.add_argument("--json", action="store_true", help="one JSON object per line")


def _gbps(x) -> str:
    if not isinstance(x, (int, float)) or not math.isfinite(x) or x <= 0:
        return "GB/s n/a (no positive time measured)"
    return f"{x:.3g} GB/s"


def _timing(r: dict, path: str) -> str:
    ms = r[f"{path}_ms"]
    if f"{path}_ms_p10" not in r:
        return f"{ms:.3f} ms"
    return (f"{ms:.3f} ms (p10-p90 {r[f'{path}_ms_p10']:.3f}-{r[f'{path}_ms_p90']:.3f}, "
            f"spread {r[f'{path}_spread']:.0%})")


def _indirection(r: dict) -> str:
    if "indirection_ratio" not in r:
        return ""
    return (f"contiguous through {r['backend']} {_timing(r, 'same_kernel')}  indirection "
            f"{r['indirection_ratio']:.3f}  ")


def _warn_if_noisy(r: dict) -> None:
    """One stderr line when a result's p10-p90 spread is over NOISY_SPREAD of its median."""
    worst = max(r.get("paged_spread", 0.0), r.get("contiguous_spread", 0.0))
    if worst > NOISY_SPREAD:
        print(f"warning: block {r['block_size']}: the timings spread {worst:.0%} of the "
              f"median (p10 to p90 over {r.get('runs', r.get('repeats', '?'))} runs): the "
              "machine is busy or the timing is noise-dominated; compare medians only when "
              "their spreads do not overlap, or rerun with more --repeats/--rounds, fixed "
              "--threads, on a quiet machine", file=sys.stderr, flush=True)


def _show(result: dict, as_json: bool) -> None:
    if as_json:
        print(json.dumps(result), flush=True)
        if result["bench"] == "attention":
            _warn_if_noisy(result)
        return
    if result["bench"] == "attention":
        r = result
        runs = r.get("runs", r.get("repeats", "?"))
        rounds = r.get("rounds", 1)
        how = f"{runs} runs" + (f" ({rounds} rounds x {r['repeats']})" if rounds > 1 else "")
        print(f"block {r['block_size']:>4}  paged {_timing(r, 'paged')} ({r['backend']})  "
              f"contiguous {_timing(r, 'contiguous')} ({r['contiguous_backend']})  "
              f"ratio {r['ratio']:.3f}  {_indirection(r)}{_gbps(r['gbps'])}  [median of {how}, "
              f"torch threads {r.get('threads', '?')}, batch {r['batch']}, context "
              f"{r['context']}, heads {r['heads']}/{r['kv_heads']}, head_dim "
              f"{r['head_dim']}, {r['dtype']}, {r['device']}]", flush=True)
        _warn_if_noisy(r)
    else:
        print(f"{result['steps_per_s']:.1f} decode steps/s ({result['tokens_per_s']:.0f} tok/s)"
              f"  {result['allocator']}, {result['seqs']} seqs, {result['model']}, "
              f"{result['device']}, backend {result['backend']}", flush=True)


MAX_KV_BYTES = 64 * 2**30  # what a benchmark may allocate for K/V (paged + contiguous copy)
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def _check_size(args: argparse.Namespace) -> None:
    """Refuse shapes whose K/V would not fit a machine, before torch allocates anything."""
    from kvviz.core.config import model_preset

    if args.bench_what == "attention":
        if args.heads % args.kv_heads:
            raise ValueError(f"--heads {args.heads} is not a multiple of --kv-heads "
                             f"{args.kv_heads}")
        per_token = 2 * args.kv_heads * args.head_dim * DTYPE_BYTES[args.dtype]
        need = 2 * args.batch * (args.context + 256) * per_token
    else:
        shape = model_preset(args.model)
        dtype = args.dtype or shape.dtype
        per_token = shape.kv_bytes_per_token // DTYPE_BYTES[shape.dtype] * DTYPE_BYTES[dtype]
        need = args.seqs * (2 * args.context + args.block_size) * per_token
    if need > MAX_KV_BYTES:
        raise ValueError(f"this shape needs about {need / 2**30:,.1f} GiB of K/V, over the "
                         f"{MAX_KV_BYTES // 2**30} GiB limit; lower --batch/--seqs or --context")


def run(args: argparse.Namespace) -> int:
    if args.bench_what is None:
        raise ValueError("say what to benchmark: attention or real (see kvviz bench --help)")
    _check_size(args)
    import torch

    from kvviz.kv import bench

    if args.device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: no CUDA device is available")
    try:
        return _run(args, torch, bench)
    except torch.OutOfMemoryError as exc:
        raise ValueError(f"out of memory on {args.device}: {str(exc)[:200]}") from None


def _run(args: argparse.Namespace, torch, bench) -> int:

    if args.threads is not None:
        if args.threads < 1:
            raise ValueError(f"threads: must be >= 1, got {args.threads}")
        torch.set_num_threads(args.threads)
    if args.bench_what == "real":
        from kvviz.kv import bench_real

        res = bench_real.bench_real(args.model, args.seqs, args.context, args.steps,
                                    args.duration, args.device, args.allocator,
                                    args.block_size, args.backend, args.dtype, args.seed)
        if res["steps"] < 1:
            raise ValueError(f"--duration {args.duration:g}: no decode step finished in time; "
                             "give a longer --duration or use --steps")
        _show(res, args.json)
        return 0
    if args.repeats < MIN_REPEATS:
        raise ValueError(f"repeats: need >= {MIN_REPEATS} timed runs, got {args.repeats}")
    cfg = bench.AttentionBench(
        args.device, args.batch, args.context, args.heads, args.kv_heads, args.head_dim,
        args.block_size, args.dtype, args.backend, args.contiguous_backend, args.repeats,
        args.warmup, args.seed)
    if args.rounds > 1 and not args.sweep_block_sizes:
        raise ValueError("--rounds: only with --sweep-block-sizes (one block size: raise "
                         "--repeats instead)")
    results = bench.sweep_block_sizes(cfg, rounds=args.rounds) if args.sweep_block_sizes else [
        bench.bench_attention(cfg)]
    for res in results:
        _show(res, args.json)
    return 0
