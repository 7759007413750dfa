"""The collector's entry point: `python -m collectors [flags]` and `kvviz collect [flags]`
both end in `run(settings)` here, with one validated kvviz.settings.collector.CollectorConfig.

`build` resolves what the settings leave open (the device actually present, the model shape,
the trace read and clipped), attaches the optional exporters and returns the EngineCollector;
no file is created before `run`. The CLI reaches this module by name
(kvviz/commands/collect.py, ENTRY), so nothing in kvviz imports collectors.
"""
from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

from collectors.engine_collector import EngineCollector, Resolved
from collectors.torch_memory import cuda_available
from kvviz.core import safeio
from kvviz.core.config import CacheConfig, EngineConfig, WorkloadConfig, model_for
from kvviz.core.errors import KvvizError
from kvviz.core.workload import clip_workload
from kvviz.settings import flags as collector_flags
from kvviz.settings import memory
from kvviz.settings.collector import CollectorConfig
from kvviz.store import liveness
from kvviz.traces.args import load_trace_args, resolve_max_seq_len, trace_line

PROG = "kvviz collect"  # errors and --help name the command both ways of starting it read


def out_path(cfg: CollectorConfig) -> Path:
    """--out checked and its directory made (runs/<UTC time>.db when not given)."""
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
    out = safeio.check_output(out, "--out", overwrite=cfg.overwrite,
                              is_ours=safeio.is_kvviz_recording, kind_name="kvviz recording")
    if cfg.overwrite and out.exists() and out.stat().st_size:
        why = liveness.live_writer(out)
        if why:
            raise KvvizError(f"--out {shown}: {why}; --overwrite never replaces a recording "
                             "being written (stop that run first, or choose another name)")
    return out


def build(c: CollectorConfig):
    """The collector a (validated) config describes: the device resolved, the model shape
    chosen, a trace read, the optional exporters attached. No file is created here."""
    device = "cpu"
    if c.device == "cuda" or (c.mode == "real" and c.device == "auto"):  # --device cpu: no
        has_cuda = cuda_available()  # torch import before the memory check
        if c.device == "cuda" and not has_cuda:
            raise KvvizError("--device cuda: no CUDA device is available")
        device = "cuda" if c.device == "cuda" or (c.device == "auto" and has_cuda) else "cpu"
    model = model_for(c.model, real_on_cpu=c.mode == "real" and device == "cpu")
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
    try:
        engine = EngineConfig(max_num_seqs=c.max_num_seqs, max_seq_len=max_seq_len,
                              max_batched_tokens=c.max_num_batched_tokens,
                              enable_chunked_prefill=c.enable_chunked_prefill,
                              watermark=c.watermark)
    except ValueError as exc:  # each knob alone is checked already: only the budget against
        # max_seq_len with chunked prefill off remains (as kvviz simulate says it)
        raise KvvizError("--max-num-batched-tokens: " + str(exc).split(": ", 1)[-1]) from None
    requests = len(trace) if trace is not None else c.requests
    memory.check(memory.need(c.lanes, c.capacity_tokens, requests,
                             model if c.mode == "real" else None, device), c.memory_budget_mb,
                 device_free=_cuda_free() if device == "cuda" and c.mode == "real" else None)
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
    resolved = Resolved(
        out=out_path(c), device=device, model=model,
        cache=CacheConfig(capacity_tokens=c.capacity_tokens, model=model), engine=engine,
        workload=workload, trace=trace)
    collector = EngineCollector(c, resolved, kv_factory)
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


def _cuda_free() -> int | None:
    """Free bytes of the current CUDA device (None when torch cannot say)."""
    try:
        import torch

        return int(torch.cuda.mem_get_info()[0])
    except Exception:  # noqa: BLE001 - not knowing is not an error: the host check stands
        return None


def run(settings: CollectorConfig) -> int:
    """Record one run as `settings` say; 0 when it ends (stopped, duration, or exhausted)."""
    collector = build(settings)
    r = collector.resolved
    if not settings.quiet:
        print(f"recording to {safeio.printable(r.out)} ({settings.mode} mode on {r.device}, "
              f"model {r.model.name}, lanes {', '.join(ln.name for ln in collector.sim.lanes)}); "
              "Ctrl-C stops", flush=True)
    try:
        status = collector.run()
    finally:
        for lp in getattr(collector, "kv_publishers", ()):
            lp.pub.close()
    if not settings.quiet:
        print(f"{safeio.printable(r.out)}: {safeio.printable(status)}", flush=True)
    return 0


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:
        """One line `kvviz collect: error: ...` and exit 2, as the kvviz CLI prints."""
        self.exit(2, f"{self.prog}: error: {safeio.printable(message)}\n")


def main(argv: list[str]) -> int:
    """`python -m collectors ARGV`: parse the flags, run; a bad flag, config or file is one
    line `kvviz collect: error: ...` and exit 2 (as `kvviz collect ARGV` prints)."""
    parser = _Parser(prog=PROG, description="record the engine live (python -m collectors)")
    collector_flags.add_arguments(parser)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, or the one error line already printed
        return exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 2
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        try:
            code = run(collector_flags.settings_of(args))
        except (KvvizError, ValueError) as exc:
            print(f"{PROG}: error: {safeio.printable(exc)}", file=sys.stderr)
            return 2
        except OSError as exc:
            name = f" {safeio.printable(exc.filename)}:" if exc.filename else ""
            print(f"{PROG}: error:{name} {safeio.printable(exc.strerror or exc)}",
                  file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            return 130
    for w in caught[:20]:
        print(f"{PROG}: warning: {w.category.__name__}: {safeio.printable(w.message)}",
              file=sys.stderr)
    return code
