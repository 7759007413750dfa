"""`kvviz scrape URL`: sample a vLLM/SGLang node's /metrics every few seconds."""
from __future__ import annotations

import argparse
import json
import sys
import time
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

from kvviz.errors import KvvizError

HELP = "scrape a vLLM/SGLang node's Prometheus /metrics (KV usage, queue, preemptions)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("url", help="node metrics URL, e.g. localhost:8000 or http://h:30000/metrics")
    p.add_argument("--interval", type=float, default=5.0, metavar="S",
                   help="seconds between scrapes (default 5)")
    p.add_argument("--duration", type=float, default=None, metavar="S",
                   help="stop after this many seconds (default: until Ctrl-C)")
    p.add_argument("--count", type=int, default=None, metavar="N",
                   help="stop after N samples")
    p.add_argument("--timeout", type=float, default=3.0, metavar="S",
                   help="give up on one scrape after this many seconds (default 3)")
    p.add_argument("--out", type=Path, default=None, metavar="FILE",
                   help="also record samples: FILE.jsonl (one JSON object a line) or FILE.db")
    p.add_argument("--json", action="store_true", help="print each sample as one JSON line")


def open_store_sink(path: Path, url: str) -> AbstractContextManager:
    """Record NodeSamples into a kvviz recording (.db). The lead wires kvviz/store.py here.

    Must return a context manager whose __enter__ gives a callable sink(sample: NodeSample).
    """
    raise KvvizError(f"{path}: the recording store is not available yet; "
                     "use --out FILE.jsonl for now")


def _open_out(path: Path | None, url: str) -> AbstractContextManager:
    from kvviz.node.scrape import JsonlSink

    if path is None:
        return nullcontext(None)
    if path.suffix == ".jsonl":
        return JsonlSink(path)
    if path.suffix == ".db":
        return open_store_sink(path, url)
    raise KvvizError(f"--out {path}: expected a .jsonl or .db file")


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _num(x: float | None, fmt: str = "{:g}") -> str:
    return "-" if x is None else fmt.format(x)


def format_line(s) -> str:
    """One human line per sample."""
    stamp = time.strftime("%H:%M:%S", time.localtime(s.time))
    if not s.ok:
        return f"{stamp} {s.status}: {s.message}"
    slots = ""
    if s.kv_used_tokens is not None and s.kv_capacity_tokens:
        slots = f" ({s.kv_used_tokens:,.0f}/{s.kv_capacity_tokens:,} slots)"
    rate = "" if s.preemptions_per_s is None else f" ({s.preemptions_per_s:.2f}/s)"
    hit = s.prefix_hit_rate if s.prefix_hit_rate_interval is None else s.prefix_hit_rate_interval
    return (f"{stamp} ok {s.engine} kv {_pct(s.kv_usage)}{slots} run {_num(s.num_running)} "
            f"wait {_num(s.num_waiting)} preempt {_num(s.preemptions_total)}{rate} "
            f"prefix hit {_pct(hit)}")


def run(args: argparse.Namespace) -> int:
    """Exit 0 when at least one scrape succeeded, 1 when none did, 2 on bad arguments."""
    from kvviz.node.scrape import Scraper, normalize_url

    if args.count is not None and args.count < 1:
        raise KvvizError(f"--count must be >= 1, got {args.count}")
    url = normalize_url(args.url)
    ok = 0
    with _open_out(args.out, url) as recorder:
        def sink(sample) -> None:
            nonlocal ok
            ok += sample.ok
            if recorder is not None:
                recorder(sample)
            line = json.dumps(sample.to_dict()) if args.json else format_line(sample)
            print(line, flush=True)

        scraper = Scraper(url, sink, interval_s=args.interval, duration_s=args.duration,
                          timeout_s=args.timeout, max_samples=args.count)
        n = scraper.run()
    if not ok:
        print(f"kvviz scrape: no successful scrape of {url} in {n} tries", file=sys.stderr)
        return 1
    return 0
