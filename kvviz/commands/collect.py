"""`kvviz collect` (= `python -m collectors`): run the engine live and record it to a store."""
from __future__ import annotations

import argparse
import importlib
import math
import time
from pathlib import Path

from kvviz import safeio
from kvviz.commands import argtypes as at
from kvviz.commands.trace_args import (
    add_trace_arguments,
    load_trace_args,
    resolve_max_seq_len,
    trace_line,
)
from kvviz.config import (
    CacheConfig,
    EngineConfig,
    LaneSpec,
    WorkloadConfig,
    check_lane_blocks,
    model_preset,
)
from kvviz.errors import KvvizError

HELP = "run the engine live (real KV tensors or sim) and record block maps, metrics, events"
STEPS_PER_S = at.float_range(0.0, 1e6)
HZ = at.float_range(0.0, 100.0, lo_open=True)
BUDGET_MB = at.float_range(0.0, 2.0**20)
PORT = at.int_range(1, 65535)
TORCH_THREADS = at.int_range(0, 4096)
DEFAULT_LANES = ("contiguous:first-fit:max", "paged:16")


def add_arguments(p: argparse.ArgumentParser) -> None:
    a = p.add_argument
    a("--mode", choices=("real", "sim"), default="real",
      help="real: torch K/V pools + attention (default); sim: allocator metadata only")
    a("--device", choices=("auto", "cpu", "cuda"), default="auto",
      help="real mode: auto = cuda when available, else cpu")
    a("--model", default=None,
      help="model shape preset (default: tiny-cpu on cpu, llama-3-8b on cuda)")
    a("--workload", default="sharegpt-like", help="length preset of the synthetic stream")
    a("--requests", type=at.REQUESTS, default=1000,
      help=at.rng("requests per stream (default 1000)", at.REQUESTS))
    a("--rate", type=at.RATE, default=2.0,
      help=at.rng("arrivals per second of wall time (default 2; inf = all at once)", at.RATE))
    a("--arrival", default="poisson", help="poisson | bursty")
    a("--prefix-sharing", type=at.SHARE, default=0.0, metavar="SHARE",
      help=at.rng("share of requests with a common system prompt (default 0)", at.SHARE))
    a("--trace", default=None, metavar="FILE", help="replay a trace instead: Azure or "
      "BurstGPT CSV, Mooncake JSONL, kvviz CSV/JSONL, as downloaded")
    add_trace_arguments(p)
    a("--lane", action="append", default=None, metavar="SPEC",
      help="allocator lane, repeatable (default: contiguous:first-fit:max and paged:16)")
    a("--capacity-tokens", type=at.CAPACITY_TOKENS, default=16384,
      help=at.rng("KV slots per lane (default 16384)", at.CAPACITY_TOKENS))
    a("--max-seq-len", type=at.MAX_SEQ_LEN, default=None, help=at.rng(
      "clip prompt+output to this (default 2048; with --trace, its longest request)",
      at.MAX_SEQ_LEN))
    a("--max-num-seqs", type=at.MAX_NUM_SEQS, default=256,
      help=at.rng("running-batch limit (default 256)", at.MAX_NUM_SEQS))
    a("--seed", type=at.SEED, default=0, help=at.rng("workload seed (default 0)", at.SEED))
    a("--duration", type=at.SECONDS, default=None, metavar="S", help=at.rng(
      "seconds (default: until stopped with Ctrl-C / SIGTERM, or the workload is exhausted)",
      at.SECONDS))
    a("--steps-per-s", type=STEPS_PER_S, default=20.0, help=at.rng(
      "pacing cap on engine steps per second (default 20; 0 = as fast as possible)",
      STEPS_PER_S))
    a("--hz", type=HZ, default=4.0, help=at.rng("samples per second (default 4)", HZ))
    a("--loop", action="store_true", help="restart a fresh seeded stream when one is exhausted")
    a("--out", default=None, metavar="PATH", help="recording (default runs/<UTC time>.db)")
    a("--overwrite", action="store_true",
      help="replace an existing --out file if it is a kvviz recording (or empty); any other "
           "file, device, FIFO, symlink or directory is never replaced")
    a("--blockmap-budget-mb", type=BUDGET_MB, default=200.0, help=at.rng(
      "block-map bytes kept per run; older maps are thinned (default 200)", BUDGET_MB))
    a("--quiet", action="store_true", help="no per-second status line")
    a("--audit", action=argparse.BooleanOptionalAction, default=False,
      help="real mode: at every sample check the K/V pools against the block tables and the "
           "generator (content, tables, attention); mismatches become audit_failed events")
    a("--metrics-port", type=PORT, default=None, help=at.rng(
      "serve Prometheus metrics on this port (needs collectors/prometheus.py)", PORT))
    a("--metrics-address", default="127.0.0.1", metavar="ADDR",
      help="address for --metrics-port (default 127.0.0.1; 0.0.0.0 exposes it to the network)")
    a("--torch-threads", type=TORCH_THREADS, default=1, metavar="N", help=at.rng(
      "real mode on CPU: torch intra-op threads (default 1, so a dashboard and a browser on "
      "the same small machine keep a core; 0 = torch's default)", TORCH_THREADS))
    a("--torch-snapshot-every", type=at.SECONDS, default=None, metavar="S", help=at.rng(
      "CUDA only: write a torch memory snapshot of this process every S seconds to "
      "<run>-torchsnap-<n>.pickle beside the recording", at.SECONDS))
    a("--kv-events", default=None, metavar="ENDPOINT",
      help="publish the paged prefix lanes' KV events like vLLM (e.g. tcp://127.0.0.1:5557; "
           "lane k on port + k)")
    a("--kv-events-replay", default=None, metavar="ENDPOINT",
      help="with --kv-events: a ROUTER replay endpoint (e.g. tcp://127.0.0.1:5558)")
    a("--kv-events-format", choices=("vllm", "sglang"), default="vllm",
      help="event encoding: vllm (maps tagged by type) or sglang (tagged arrays)")
    a("--kv-events-record", action="store_true",
      help="record the paged prefix lanes' KV events into the run's kv tables (always done "
           "with --kv-events; alone, nothing is published)")


def _check(cond: bool, msg: str) -> None:
    if not cond:
        raise ValueError(msg)


def _out_path(args: argparse.Namespace) -> Path:
    if args.out is None:
        out = Path("runs") / (time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + ".db")
    else:
        out = Path(args.out)
    shown = safeio.printable(out)
    if out.is_dir():
        raise KvvizError(f"--out {shown}: is a directory; give a file name such as "
                         f"{shown}/run.db")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise KvvizError(f"--out {shown}: cannot create directory "
                         f"{safeio.printable(out.parent)} ({exc.strerror or exc})") from None
    return safeio.check_output(out, "--out", overwrite=args.overwrite,
                               is_ours=safeio.is_kvviz_recording, kind_name="kvviz recording")


def build(args: argparse.Namespace):
    """Validate every flag and build the collector; no file is created here."""
    from collectors.engine_collector import CollectorConfig, EngineCollector
    from kvviz.workload import clip_workload

    _check(args.hz > 0 and math.isfinite(args.hz) and args.hz <= 100,
           f"--hz: must be in (0, 100], got {args.hz}")
    _check(args.steps_per_s >= 0 and math.isfinite(args.steps_per_s),
           f"--steps-per-s: must be >= 0, got {args.steps_per_s}")
    _check(args.duration is None or 0 < args.duration < math.inf,
           f"--duration: must be > 0 and finite, got {args.duration}")
    _check(0 <= args.blockmap_budget_mb < math.inf, f"--blockmap-budget-mb: must be >= 0 and "
           f"finite, got {args.blockmap_budget_mb}")
    _check(args.capacity_tokens >= 1, f"--capacity-tokens: must be >= 1, got "
           f"{args.capacity_tokens}")
    _check(not args.audit or args.mode == "real", "--audit: needs --mode real (sim mode has "
           "no K/V pools to audit)")
    lanes = tuple(LaneSpec.parse(s) for s in (args.lane or DEFAULT_LANES))
    check_lane_blocks(lanes, args.capacity_tokens)
    device = "cpu"
    if args.mode == "real" or args.device == "cuda":
        from collectors.torch_memory import cuda_available

        has_cuda = cuda_available()
        _check(args.device != "cuda" or has_cuda, "--device cuda: no CUDA device is available")
        device = "cuda" if args.device == "cuda" or (args.device == "auto" and has_cuda) else "cpu"
    model = model_preset(args.model or ("llama-3-8b" if device == "cuda" else "tiny-cpu"))
    workload = trace = None
    if args.trace:
        trace, info = load_trace_args(args, 256, show_progress=not args.quiet)
        max_seq_len = resolve_max_seq_len(args.max_seq_len, trace)
        trace = clip_workload(trace, max_seq_len)
        if not args.quiet:
            print(trace_line(info, trace, max_seq_len), flush=True)
    else:
        max_seq_len = resolve_max_seq_len(args.max_seq_len, None)
        workload = WorkloadConfig(
            preset=args.workload, num_requests=args.requests, rate=args.rate,
            arrival=args.arrival, max_seq_len=max_seq_len,
            prefix_share=args.prefix_sharing, seed=args.seed)
    engine = EngineConfig(max_num_seqs=args.max_num_seqs, max_seq_len=max_seq_len)
    kv_factory = None
    if args.mode == "real":
        try:
            real = importlib.import_module("kvviz.kv.real")
        except ImportError as exc:
            raise KvvizError(f"--mode real needs torch and kvviz.kv ({exc}); "
                             "use --mode sim") from None
        seed = args.seed
        _check(args.torch_threads >= 0, f"--torch-threads: must be >= 0, got {args.torch_threads}")
        if device == "cpu" and args.torch_threads:
            import torch

            torch.set_num_threads(args.torch_threads)

        def kv_factory(alloc):
            return real.RealKV(alloc, model, device, seed)
    cfg = CollectorConfig(
        out=_out_path(args), mode=args.mode, device=device, model=model,
        cache=CacheConfig(capacity_tokens=args.capacity_tokens, model=model), engine=engine,
        lanes=lanes, workload=workload, trace=trace, trace_path=args.trace or "",
        duration_s=args.duration, hz=args.hz, steps_per_s=args.steps_per_s, loop=args.loop,
        blockmap_budget_bytes=int(args.blockmap_budget_mb * 2**20), quiet=args.quiet,
        overwrite=args.overwrite, audit=args.audit)
    collector = EngineCollector(cfg, kv_factory)
    if args.metrics_port is not None:
        try:
            exporter = importlib.import_module("collectors.prometheus")
        except ModuleNotFoundError:
            raise KvvizError("--metrics-port: the Prometheus exporter (collectors/prometheus.py) "
                             "is not available in this build") from None
        exporter.attach(collector, args.metrics_port, args.metrics_address)
    if getattr(args, "kv_events", None) or getattr(args, "kv_events_record", False):
        from kvviz.node.kvevents import engine_source

        collector.kv_publishers = engine_source.attach(
            collector, args.kv_events, args.kv_events_replay, args.kv_events_format)
    if args.torch_snapshot_every is not None:
        from collectors import torch_snapshots

        torch_snapshots.attach(collector, args.torch_snapshot_every)
    return collector


def run(args: argparse.Namespace) -> int:
    collector = build(args)
    c = collector.cfg
    if not c.quiet:
        print(f"recording to {safeio.printable(c.out)} ({c.mode} mode on {c.device}, model "
              f"{c.model.name}, lanes {', '.join(ln.name for ln in collector.sim.lanes)}); "
              "Ctrl-C stops", flush=True)
    try:
        status = collector.run()
    finally:
        for lp in getattr(collector, "kv_publishers", ()):
            lp.pub.close()
    if not c.quiet:
        print(f"{safeio.printable(c.out)}: {safeio.printable(status)}", flush=True)
    return 0
