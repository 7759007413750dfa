"""`kvviz bench attention|real`: decode-attention and real-mode benchmarks (needs torch)."""
from __future__ import annotations

import argparse
import json

HELP = "benchmark paged vs contiguous decode attention, or real-mode decode steps"
DTYPES = ("float32", "bfloat16", "float16")
MIN_REPEATS = 20


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="bench_what", metavar="WHAT", parser_class=type(parser))
    parser.set_defaults(_bench_parser=parser)

    a = sub.add_parser("attention", help="paged vs contiguous decode attention, same K/V",
                       description="Time paged vs contiguous decode attention over the same "
                       "K/V (median of --repeats runs after warm-up). ratio = paged/contiguous, "
                       "gbps = K/V bytes read / paged time.")
    a.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    a.add_argument("--batch", type=int, default=16)
    a.add_argument("--context", type=int, default=1024, help="tokens per sequence")
    a.add_argument("--heads", type=int, default=8, help="query heads")
    a.add_argument("--kv-heads", type=int, default=8)
    a.add_argument("--head-dim", type=int, default=128)
    a.add_argument("--block-size", type=int, default=16)
    a.add_argument("--dtype", choices=DTYPES, default="float32")
    a.add_argument("--backend", choices=("auto", "torch", "triton"), default="auto",
                   help="paged path backend (auto: triton on CUDA, torch elsewhere)")
    a.add_argument("--contiguous-backend", choices=("auto", "torch", "triton"), default="torch",
                   help="baseline backend (default torch: SDPA over contiguous K/V)")
    a.add_argument("--repeats", type=int, default=MIN_REPEATS, help=f">= {MIN_REPEATS}")
    a.add_argument("--warmup", type=int, default=3)
    a.add_argument("--sweep-block-sizes", action="store_true",
                   help="one result per block size 1, 2, 4, ..., 256")
    _common(a)

    r = sub.add_parser("real", help="RealKV decode steps per second",
                       description="Decode steps per second of real mode (RealKV with a real "
                       "allocator) over a full running batch; prefill time is not counted.")
    r.add_argument("--model", default="tiny-cpu")
    r.add_argument("--seqs", type=int, default=64, help="running sequences")
    r.add_argument("--context", type=int, default=300, help="typical length (start ~U[c/2, 3c/2])")
    r.add_argument("--steps", type=int, default=200)
    r.add_argument("--duration", type=float, default=None, help="seconds (overrides --steps)")
    r.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    r.add_argument("--allocator", choices=("paged", "contiguous"), default="paged")
    r.add_argument("--block-size", type=int, default=16)
    r.add_argument("--backend", choices=("auto", "torch", "triton"), default="auto")
    r.add_argument("--dtype", choices=DTYPES, default=None, help="default: the model's")
    _common(r)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="one JSON object per line")


def _show(result: dict, as_json: bool) -> None:
    if as_json:
        print(json.dumps(result), flush=True)
        return
    if result["bench"] == "attention":
        print(f"block {result['block_size']:>4}  paged {result['paged_ms']:.3f} ms "
              f"({result['backend']})  contiguous {result['contiguous_ms']:.3f} ms "
              f"({result['contiguous_backend']})  ratio {result['ratio']:.3f}  "
              f"{result['gbps']:.1f} GB/s  [batch {result['batch']}, context "
              f"{result['context']}, heads {result['heads']}/{result['kv_heads']}, head_dim "
              f"{result['head_dim']}, {result['dtype']}, {result['device']}]", flush=True)
    else:
        print(f"{result['steps_per_s']:.1f} decode steps/s ({result['tokens_per_s']:.0f} tok/s)"
              f"  {result['allocator']}, {result['seqs']} seqs, {result['model']}, "
              f"{result['device']}, backend {result['backend']}", flush=True)


def run(args: argparse.Namespace) -> int:
    if args.bench_what is None:
        args._bench_parser.print_help()
        return 2
    import torch

    from kvviz.kv import bench

    if args.threads is not None:
        if args.threads < 1:
            raise ValueError(f"threads: must be >= 1, got {args.threads}")
        torch.set_num_threads(args.threads)
    if args.bench_what == "real":
        _show(bench.bench_real(args.model, args.seqs, args.context, args.steps, args.duration,
                               args.device, args.allocator, args.block_size, args.backend,
                               args.dtype, args.seed), args.json)
        return 0
    if args.repeats < MIN_REPEATS:
        raise ValueError(f"repeats: need >= {MIN_REPEATS} timed runs, got {args.repeats}")
    cfg = bench.AttentionBench(
        args.device, args.batch, args.context, args.heads, args.kv_heads, args.head_dim,
        args.block_size, args.dtype, args.backend, args.contiguous_backend, args.repeats,
        args.warmup, args.seed)
    results = bench.sweep_block_sizes(cfg) if args.sweep_block_sizes else [
        bench.bench_attention(cfg)]
    for res in results:
        _show(res, args.json)
    return 0
