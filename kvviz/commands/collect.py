"""`kvviz collect` (= `python -m collectors`): run the engine live and record it to a store."""
from __future__ import annotations

import argparse
import importlib
import math
import os
import time
from pathlib import Path

from kvviz.config import CacheConfig, EngineConfig, LaneSpec, WorkloadConfig, model_preset
from kvviz.errors import KvvizError

HELP = "run the engine live (real KV tensors or sim) and record block maps, metrics, events"
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
    a("--requests", type=int, default=1000, help="requests per stream (default 1000)")
    a("--rate", type=float, default=2.0,
      help="arrivals per second of wall time (default 2; inf = all at once)")
    a("--arrival", default="poisson", help="poisson | bursty")
    a("--prefix-sharing", type=float, default=0.0, metavar="SHARE",
      help="share of requests with a common system prompt, 0..1 (default 0)")
    a("--trace", default=None, metavar="FILE", help="replay a CSV/JSONL trace instead")
    a("--lane", action="append", default=None, metavar="SPEC",
      help="allocator lane, repeatable (default: contiguous:first-fit:max and paged:16)")
    a("--capacity-tokens", type=int, default=16384, help="KV slots per lane (default 16384)")
    a("--max-seq-len", type=int, default=2048)
    a("--max-num-seqs", type=int, default=256)
    a("--seed", type=int, default=0)
    a("--duration", type=float, default=None, metavar="S", help="seconds (default: until "
      "stopped with Ctrl-C / SIGTERM, or the workload is exhausted)")
    a("--steps-per-s", type=float, default=20.0,
      help="pacing cap on engine steps per second (default 20; 0 = as fast as possible)")
    a("--hz", type=float, default=4.0, help="samples per second (default 4)")
    a("--loop", action="store_true", help="restart a fresh seeded stream when one is exhausted")
    a("--out", default=None, metavar="PATH", help="recording (default runs/<UTC time>.db)")
    a("--overwrite", action="store_true", help="replace an existing --out file")
    a("--blockmap-budget-mb", type=float, default=200.0,
      help="block-map bytes kept per run; older maps are thinned (default 200)")
    a("--quiet", action="store_true", help="no per-second status line")
    a("--audit", action=argparse.BooleanOptionalAction, default=False,
      help="real mode: at every sample check the K/V pools against the block tables and the "
           "generator (content, tables, attention); mismatches become audit_failed events")
    a("--metrics-port", type=int, default=None,
      help="serve Prometheus metrics on this port (needs collectors/prometheus.py)")
    a("--metrics-address", default="127.0.0.1", metavar="ADDR",
      help="address for --metrics-port (default 127.0.0.1; 0.0.0.0 exposes it to the network)")
    a("--torch-threads", type=int, default=1, metavar="N",
      help="real mode on CPU: torch intra-op threads (default 1, so a dashboard and a "
           "browser on the same small machine keep a core; 0 = torch's default)")
    a("--torch-snapshot-every", type=float, default=None, metavar="S",
      help="CUDA only: write a torch memory snapshot of this process every S seconds "
           "to <run>-torchsnap-<n>.pickle beside the recording")
    a("--kv-events", default=None, metavar="ENDPOINT",
      help="publish the paged prefix lanes' KV events like vLLM (e.g. tcp://127.0.0.1:5557; "
           "lane k on port + k)")
    a("--kv-events-replay", default=None, metavar="ENDPOINT",
      help="with --kv-events: a ROUTER replay endpoint (e.g. tcp://127.0.0.1:5558)")
    a("--kv-events-format", choices=("vllm", "sglang"), default="vllm",
      help="event encoding: vllm (maps tagged by type) or sglang (tagged arrays)")


def _check(cond: bool, msg: str) -> None:
    if not cond:
        raise ValueError(msg)


def _out_path(args: argparse.Namespace) -> Path:
    if args.out is None:
        out = Path("runs") / (time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + ".db")
    else:
        out = Path(args.out)
    if out.is_dir():
        raise KvvizError(f"--out {out}: is a directory; give a file name such as {out}/run.db")
    if out.exists() and not args.overwrite:
        raise KvvizError(f"--out {out}: already exists (use --overwrite to replace it)")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise KvvizError(f"--out {out}: cannot create directory {out.parent} ({exc})") from None
    if not os.access(out.parent, os.W_OK):
        raise KvvizError(f"--out {out}: directory {out.parent} is not writable")
    return out


def build(args: argparse.Namespace):
    """Validate every flag and build the collector; no file is created here."""
    from collectors.engine_collector import CollectorConfig, EngineCollector
    from kvviz.workload import load_trace

    _check(args.hz > 0 and math.isfinite(args.hz) and args.hz <= 100,
           f"--hz: must be in (0, 100], got {args.hz}")
    _check(args.steps_per_s >= 0 and math.isfinite(args.steps_per_s),
           f"--steps-per-s: must be >= 0, got {args.steps_per_s}")
    _check(args.duration is None or args.duration > 0,
           f"--duration: must be > 0, got {args.duration}")
    _check(args.blockmap_budget_mb >= 0, f"--blockmap-budget-mb: must be >= 0, got "
           f"{args.blockmap_budget_mb}")
    _check(args.capacity_tokens >= 1, f"--capacity-tokens: must be >= 1, got "
           f"{args.capacity_tokens}")
    _check(not args.audit or args.mode == "real", "--audit: needs --mode real (sim mode has "
           "no K/V pools to audit)")
    lanes = tuple(LaneSpec.parse(s) for s in (args.lane or DEFAULT_LANES))
    device = "cpu"
    if args.mode == "real" or args.device == "cuda":
        from collectors.torch_memory import cuda_available

        has_cuda = cuda_available()
        _check(args.device != "cuda" or has_cuda, "--device cuda: no CUDA device is available")
        device = "cuda" if args.device == "cuda" or (args.device == "auto" and has_cuda) else "cpu"
    model = model_preset(args.model or ("llama-3-8b" if device == "cuda" else "tiny-cpu"))
    engine = EngineConfig(max_num_seqs=args.max_num_seqs, max_seq_len=args.max_seq_len)
    workload = trace = None
    if args.trace:
        trace = load_trace(args.trace, max_seq_len=args.max_seq_len)
    else:
        workload = WorkloadConfig(
            preset=args.workload, num_requests=args.requests, rate=args.rate,
            arrival=args.arrival, max_seq_len=args.max_seq_len,
            prefix_share=args.prefix_sharing, seed=args.seed)
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
    if getattr(args, "kv_events", None):
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
        print(f"recording to {c.out} ({c.mode} mode on {c.device}, model {c.model.name}, lanes "
              f"{', '.join(ln.name for ln in collector.sim.lanes)}); Ctrl-C stops", flush=True)
    try:
        status = collector.run()
    finally:
        for lp in getattr(collector, "kv_publishers", ()):
            lp.pub.close()
    if not c.quiet:
        print(f"{c.out}: {status}", flush=True)
    return 0
