"""`kvviz collect` (= `python -m collectors`): run the engine live and record it to a store.

The flags build one kvviz.collector_config.CollectorConfig (validated there); `--config FILE`
reads one from a JSON file (the dashboard's way of starting a collector), and flags given
beside it override the file's fields.
"""
from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path

from kvviz import safeio
from kvviz.collector_config import (
    BUDGET_MB,
    HZ,
    PORT,
    STEPS_PER_S,
    TORCH_THREADS,
    CollectorConfig,
    from_flags,
)
from kvviz.commands import argtypes as at
from kvviz.commands.trace_args import (
    add_trace_arguments,
    load_trace_args,
    resolve_max_seq_len,
    trace_line,
)
from kvviz.config import CacheConfig, EngineConfig, WorkloadConfig, model_preset
from kvviz.errors import KvvizError

HELP = "run the engine live (real KV tensors or sim) and record block maps, metrics, events"
SETTINGS = tuple(f.name for f in dataclasses.fields(CollectorConfig))


class _NoDefault:
    """add_argument without a default: a flag not given leaves no attribute, so the default
    is CollectorConfig's (or --config's field). The help texts state CollectorConfig's."""

    def __init__(self, parser: argparse.ArgumentParser) -> None:
        self.parser = parser

    def add_argument(self, *flags: str, **kw) -> argparse.Action:
        return self.parser.add_argument(*flags, **{**kw, "default": argparse.SUPPRESS})


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", metavar="FILE", help=(
        "read the settings from a JSON file (field names as the flags, e.g. "
        "{\"mode\": \"sim\", \"lanes\": [\"paged:16\"]}); flags given beside it win"))
    a = _NoDefault(p).add_argument
    a("--mode", choices=("real", "sim"),
      help="real: torch K/V pools + attention (default); sim: allocator metadata only")
    a("--device", choices=("auto", "cpu", "cuda"),
      help="real mode: auto = cuda when available, else cpu")
    a("--model",
      help="model shape preset (default: tiny-cpu on cpu, llama-3-8b on cuda)")
    a("--workload", help="length preset of the synthetic stream")
    a("--requests", type=at.REQUESTS,
      help=at.rng("requests per stream (default 1000)", at.REQUESTS))
    a("--rate", type=at.RATE,
      help=at.rng("arrivals per second of wall time (default 2; inf = all at once)", at.RATE))
    a("--arrival", help="poisson | bursty")
    a("--prefix-sharing", type=at.SHARE, metavar="SHARE",
      help=at.rng("share of requests with a common system prompt (default 0)", at.SHARE))
    a("--trace", metavar="FILE", help="replay a trace instead: Azure or "
      "BurstGPT CSV, Mooncake JSONL, kvviz CSV/JSONL, as downloaded")
    add_trace_arguments(_NoDefault(p))
    a("--lane", action="append", dest="lanes", metavar="SPEC",
      help="allocator lane, repeatable (default: contiguous:first-fit:max and paged:16)")
    a("--capacity-tokens", type=at.CAPACITY_TOKENS,
      help=at.rng("KV slots per lane (default 16384)", at.CAPACITY_TOKENS))
    a("--max-seq-len", type=at.MAX_SEQ_LEN, help=at.rng(
      "clip prompt+output to this (default 2048; with --trace, its longest request)",
      at.MAX_SEQ_LEN))
    a("--max-num-seqs", type=at.MAX_NUM_SEQS,
      help=at.rng("running-batch limit (default 256)", at.MAX_NUM_SEQS))
    a("--seed", type=at.SEED, help=at.rng("workload seed (default 0)", at.SEED))
    a("--duration", type=at.SECONDS, metavar="S", help=at.rng(
      "seconds (default: until stopped with Ctrl-C / SIGTERM, or the workload is exhausted)",
      at.SECONDS))
    a("--steps-per-s", type=STEPS_PER_S, help=at.rng(
      "pacing cap on engine steps per second (default 20; 0 = as fast as possible)",
      STEPS_PER_S))
    a("--hz", type=HZ, help=at.rng("samples per second (default 4)", HZ))
    a("--loop", action="store_true", help="restart a fresh seeded stream when one is exhausted")
    a("--out", metavar="PATH", help="recording (default runs/<UTC time>.db)")
    a("--overwrite", action="store_true",
      help="replace an existing --out file if it is a kvviz recording (or empty); any other "
           "file, device, FIFO, symlink or directory is never replaced")
    a("--blockmap-budget-mb", type=BUDGET_MB, help=at.rng(
      "block-map bytes kept per run; older maps are thinned (default 200)", BUDGET_MB))
    a("--quiet", action="store_true", help="no per-second status line")
    a("--audit", action=argparse.BooleanOptionalAction,
      help="real mode: at every sample check the K/V pools against the block tables and the "
           "generator (content, tables, attention); mismatches become audit_failed events")
    a("--metrics-port", type=PORT, help=at.rng(
      "serve Prometheus metrics on this port (needs collectors/prometheus.py)", PORT))
    a("--metrics-address", metavar="ADDR",
      help="address for --metrics-port (default 127.0.0.1; 0.0.0.0 exposes it to the network)")
    a("--torch-threads", type=TORCH_THREADS, metavar="N", help=at.rng(
      "real mode on CPU: torch intra-op threads (default 1, so a dashboard and a browser on "
      "the same small machine keep a core; 0 = torch's default)", TORCH_THREADS))
    a("--torch-snapshot-every", type=at.SECONDS, metavar="S", help=at.rng(
      "CUDA only: write a torch memory snapshot of this process every S seconds to "
      "<run>-torchsnap-<n>.pickle beside the recording", at.SECONDS))
    a("--kv-events", metavar="ENDPOINT",
      help="publish the paged prefix lanes' KV events like vLLM (e.g. tcp://127.0.0.1:5557; "
           "lane k on port + k)")
    a("--kv-events-replay", metavar="ENDPOINT",
      help="with --kv-events: a ROUTER replay endpoint (e.g. tcp://127.0.0.1:5558)")
    a("--kv-events-format", choices=("vllm", "sglang"),
      help="event encoding: vllm (maps tagged by type) or sglang (tagged arrays)")
    a("--kv-events-record", action="store_true",
      help="record the paged prefix lanes' KV events into the run's kv tables (always done "
           "with --kv-events; alone, nothing is published)")


def config_of(args: argparse.Namespace) -> CollectorConfig:
    """The flags as one CollectorConfig: --config's file (if any), then the flags given."""
    base = None
    if getattr(args, "config", None):
        try:
            base = CollectorConfig.load(Path(args.config), "--config")
        except ValueError as exc:
            raise KvvizError(safeio.printable(exc)) from None
    given = {k: v for k, v in vars(args).items() if k in SETTINGS}
    return from_flags(given, base)


def _out_path(cfg: CollectorConfig) -> Path:
    if cfg.out is None:
        out = Path("runs") / (time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + ".db")
    else:
        out = Path(cfg.out)
    shown = safeio.printable(out)
    if out.is_dir():
        raise KvvizError(f"--out {shown}: is a directory; give a file name such as "
                         f"{shown}/run.db")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise KvvizError(f"--out {shown}: cannot create directory "
                         f"{safeio.printable(out.parent)} ({exc.strerror or exc})") from None
    return safeio.check_output(out, "--out", overwrite=cfg.overwrite,
                               is_ours=safeio.is_kvviz_recording, kind_name="kvviz recording")


def build(args: argparse.Namespace):
    """Validate every flag and build the collector; no file is created here."""
    return build_config(config_of(args))


def build_config(c: CollectorConfig):
    """The collector a (validated) config describes: the device resolved, the model shape
    chosen, a trace read, the optional exporters attached. No file is created here."""
    from collectors.engine_collector import CollectorPlan, EngineCollector
    from kvviz.workload import clip_workload

    device = "cpu"
    if c.mode == "real" or c.device == "cuda":
        from collectors.torch_memory import cuda_available

        has_cuda = cuda_available()
        if c.device == "cuda" and not has_cuda:
            raise KvvizError("--device cuda: no CUDA device is available")
        device = "cuda" if c.device == "cuda" or (c.device == "auto" and has_cuda) else "cpu"
    model = model_preset(c.model or ("llama-3-8b" if device == "cuda" else "tiny-cpu"))
    workload = trace = None
    if c.trace:
        trace, info = load_trace_args(c, 256, show_progress=not c.quiet)
        max_seq_len = resolve_max_seq_len(c.max_seq_len, trace)
        trace = clip_workload(trace, max_seq_len)
        if not c.quiet:
            print(trace_line(info, trace, max_seq_len), flush=True)
    else:
        max_seq_len = resolve_max_seq_len(c.max_seq_len, None)
        workload = WorkloadConfig(
            preset=c.workload, num_requests=c.requests, rate=c.rate, arrival=c.arrival,
            max_seq_len=max_seq_len, prefix_share=c.prefix_sharing, seed=c.seed)
    engine = EngineConfig(max_num_seqs=c.max_num_seqs, max_seq_len=max_seq_len)
    kv_factory = None
    if c.mode == "real":
        try:
            from kvviz.kv import real
        except ImportError as exc:
            raise KvvizError(f"--mode real needs torch and kvviz.kv ({exc}); "
                             "use --mode sim") from None
        if device == "cpu" and c.torch_threads:
            import torch

            torch.set_num_threads(c.torch_threads)

        def kv_factory(alloc):
            return real.RealKV(alloc, model, device, c.seed)
    plan = CollectorPlan(
        out=_out_path(c), mode=c.mode, device=device, model=model,
        cache=CacheConfig(capacity_tokens=c.capacity_tokens, model=model), engine=engine,
        lanes=c.lane_specs(), workload=workload, trace=trace, trace_path=c.trace or "",
        duration_s=c.duration, hz=c.hz, steps_per_s=c.steps_per_s, loop=c.loop,
        blockmap_budget_bytes=int(c.blockmap_budget_mb * 2**20), quiet=c.quiet,
        overwrite=c.overwrite, audit=c.audit)
    collector = EngineCollector(plan, kv_factory)
    if c.metrics_port is not None:
        try:
            from collectors import prometheus
        except ModuleNotFoundError as exc:
            raise KvvizError(f"--metrics-port: the Prometheus exporter needs {exc.name} "
                             "(pip install prometheus_client)") from None
        prometheus.attach(collector, c.metrics_port, c.metrics_address)
    if c.kv_events or c.kv_events_record:
        from kvviz.node.kvevents import engine_source

        collector.kv_publishers = engine_source.attach(
            collector, c.kv_events, c.kv_events_replay, c.kv_events_format)
    if c.torch_snapshot_every is not None:
        from collectors import torch_snapshots

        torch_snapshots.attach(collector, c.torch_snapshot_every)
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
