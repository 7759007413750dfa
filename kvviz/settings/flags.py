"""`kvviz collect`'s flags (also `python -m collectors`'s): each builds one field of
kvviz.settings.collector.CollectorConfig, same name with `-` for `_` (`--lane` fills `lanes`).

`--config FILE` reads a whole CollectorConfig from a JSON file (the dashboard's way of starting
a collector); flags given beside it override the file's fields. The help texts state
CollectorConfig's defaults. This module sits below the CLI: kvviz/commands/collect.py and
collectors/launch.py both parse with it.
"""
from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from kvviz.core import limits as at
from kvviz.core import safeio
from kvviz.core.config import MODEL_HELP
from kvviz.core.errors import KvvizError
from kvviz.settings.collector import (
    BUDGET_MB,
    HZ,
    MAX_STEPS,
    MEMORY_BUDGET_MB,
    PORT,
    STEPS_PER_S,
    TORCH_THREADS,
    CollectorConfig,
    from_flags,
)
from kvviz.traces.args import add_trace_arguments

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
    a("--model", metavar="PRESET", help=MODEL_HELP)
    a("--workload", help="length preset of the synthetic stream")
    a("--requests", type=at.REQUESTS,
      help=at.rng("requests per stream (default 1000)", at.REQUESTS))
    a("--rate", type=at.RATE, metavar="R", help=at.rng(at.RATE_HELP, at.RATE))
    a("--arrival", choices=("poisson", "bursty"),
      help="inter-arrival process (bursty = gamma with shape 0.25)")
    a("--prefix-sharing", type=at.SHARE, nargs="?", const=at.PREFIX_SHARE_BARE,
      metavar="SHARE", help=at.rng(at.PREFIX_SHARING_HELP + "; 256-token prompts", at.SHARE))
    a("--trace", metavar="FILE", help="replay a trace instead: Azure or "
      "BurstGPT CSV, Mooncake JSONL, kvviz CSV/JSONL, as downloaded")
    add_trace_arguments(_NoDefault(p))
    a("--lane", action="append", dest="lanes", metavar="SPEC", help=at.LANE_HELP)
    a("--capacity-tokens", type=at.CAPACITY_TOKENS, metavar="N",
      help=at.rng(at.CAPACITY_TOKENS_HELP, at.CAPACITY_TOKENS))
    a("--max-seq-len", type=at.MAX_SEQ_LEN, help=at.rng(
      "clip prompt+output to this (default 2048; with --trace, its longest request)",
      at.MAX_SEQ_LEN))
    a("--max-num-seqs", type=at.MAX_NUM_SEQS, metavar="N",
      help=at.rng(at.MAX_NUM_SEQS_HELP, at.MAX_NUM_SEQS))
    a("--max-num-batched-tokens", type=at.BATCHED_TOKENS, metavar="N",
      help=at.rng(at.BATCHED_TOKENS_HELP, at.BATCHED_TOKENS))
    a("--enable-chunked-prefill", action=argparse.BooleanOptionalAction,
      help=at.CHUNKED_PREFILL_HELP)
    a("--watermark", type=at.WATERMARK, help=at.rng(at.WATERMARK_HELP, at.WATERMARK))
    a("--seed", type=at.SEED, help=at.rng("workload seed (default 0)", at.SEED))
    a("--duration", type=at.SECONDS, metavar="S", help=at.rng(
      "seconds (default: until stopped with Ctrl-C / SIGTERM, or the workload is exhausted)",
      at.SECONDS))
    a("--steps-per-s", type=STEPS_PER_S, help=at.rng(
      "pacing cap on engine steps per second (default 20; 0 = as fast as possible)",
      STEPS_PER_S))
    a("--max-steps", type=MAX_STEPS, metavar="N", help=at.rng(
      "stop after N engine steps, counted over the whole run (default: no bound); with "
      "--steps-per-s 0 and --rate inf a sim run then ends in the same state on any machine",
      MAX_STEPS))
    a("--hz", type=HZ, help=at.rng("samples per second (default 4)", HZ))
    a("--loop", action="store_true", help="restart a fresh seeded stream when one is exhausted")
    a("--out", metavar="PATH", help="recording (default runs/<UTC time>.db)")
    a("--overwrite", action="store_true",
      help="replace an existing --out file if it is a kvviz recording (or empty); any other "
           "file, device, FIFO, symlink or directory is never replaced")
    a("--blockmap-budget-mb", type=BUDGET_MB, help=at.rng(
      "block-map bytes kept per run; older maps are thinned (default 200)", BUDGET_MB))
    a("--memory-budget-mb", type=MEMORY_BUDGET_MB, metavar="MB", help=at.rng(
      "memory the whole run may take (every lane's metadata, real mode's K/V pools, the "
      "requests), checked before anything is allocated (default: 80%% of the memory "
      "available now)", MEMORY_BUDGET_MB))
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


def settings_of(args: argparse.Namespace) -> CollectorConfig:
    """The flags as one CollectorConfig: --config's file (if any), then the flags given."""
    base = None
    if getattr(args, "config", None):
        try:
            base = CollectorConfig.load(Path(args.config), "--config")
        except ValueError as exc:
            raise KvvizError(safeio.printable(exc)) from None
    given = {k: v for k, v in vars(args).items() if k in SETTINGS}
    return from_flags(given, base)
