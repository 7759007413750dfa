"""`kvviz scrape URL`: sample a vLLM/SGLang node's /metrics every few seconds."""
from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
import urllib.parse
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

from kvviz.core import limits as at
from kvviz.core import safeio
from kvviz.core.errors import KvvizError

GIVE_UP = 12  # failed scrapes in a row that end an unbounded run (a dead node)
HELP = "scrape a vLLM/SGLang node's Prometheus /metrics (KV usage, queue, preemptions)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("url", help="node metrics URL, e.g. localhost:8000 or http://h:30000/metrics")
    p.add_argument("--interval", type=at.SECONDS, default=5.0, metavar="S",
                   help=at.rng("seconds between scrapes (default 5)", at.SECONDS))
    p.add_argument("--duration", type=at.SECONDS, default=None, metavar="S",
                   help=at.rng("stop after this many seconds (default: until Ctrl-C)",
                               at.SECONDS))
    p.add_argument("--count", type=at.COUNT, default=None, metavar="N",
                   help=at.rng("stop after N samples", at.COUNT))
    p.add_argument("--give-up", type=at.COUNT, default=GIVE_UP, metavar="N", help=at.rng(
        f"without --count or --duration: stop after N failed scrapes in a row (default "
        f"{GIVE_UP}: a minute at the default interval)", at.COUNT))
    p.add_argument("--timeout", type=at.TIMEOUT, default=3.0, metavar="S",
                   help=at.rng("give up on one scrape after this many seconds (default 3)",
                               at.TIMEOUT))
    p.add_argument("--out", type=Path, default=None, metavar="FILE",
                   help="also record samples: FILE.jsonl (one JSON object a line, appended "
                        "to an existing scrape log) or FILE.db (a new recording)")
    p.add_argument("--json", action="store_true", help="print each sample as one JSON line")
    p.add_argument("--quiet", action="store_true", help="print nothing per sample")
    p.add_argument("--nvml", choices=("auto", "always", "never"), default="auto",
                   help="with --out FILE.db, also record this machine's GPU memory (NVML); "
                        "auto: only when the URL is a loopback address (default)")


class StoreSink:
    """Records NodeSamples into a new kvviz recording (meta mode "node"), one commit each,
    plus the local GPUs' NVML memory when asked (`nvml`: "auto" = only for a loopback URL,
    where the node runs on this machine; "always"; "never")."""

    def __init__(self, path: Path, url: str, *, nvml: str = "auto", scrape: dict | None = None,
                 extra_meta: dict | None = None) -> None:
        from kvviz.node.scrape import is_loopback_host
        from kvviz.store.writer import RunWriter

        host = urllib.parse.urlsplit(url).hostname or ""
        use_nvml = nvml == "always" or (nvml == "auto" and is_loopback_host(host))
        self.probe = None
        if use_nvml:
            from kvviz.node.nvml import NvmlProbe

            self.probe = NvmlProbe()
        nv = ({"status": "not used", "reason": f"the node {host} is not this machine"}
              if self.probe is None else {"status": self.probe.status,
                                          "reason": self.probe.reason})
        self.t0 = time.time()
        meta = {"mode": "node", "url": url, "device": "node", "lanes": [],
                "scrape": scrape or {}, "nvml": nv, "versions": _versions(),
                "started_unix": self.t0, **(extra_meta or {})}
        try:
            self.writer = RunWriter(path, meta)
        except BaseException:
            self._close_probe()
            raise
        self.status, self.message = "finished", ""

    def __call__(self, sample) -> None:
        d = sample.to_dict()
        raw = d.pop("raw")
        t = sample.time - self.t0
        self.writer.add_node_sample(t, d, raw)
        if self.probe is not None:
            for rec in self.probe.sample():
                self.writer.add_device_memory(t, rec)
        self.writer.commit()

    def _close_probe(self) -> None:
        if self.probe is not None:
            self.probe.close()

    def __enter__(self) -> StoreSink:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self._close_probe()
        if exc_type is KeyboardInterrupt:
            self.writer.close("stopped", "stopped by SIGINT")
        elif exc is not None:
            self.writer.close("error", f"{exc_type.__name__}: {exc}")
        else:
            self.writer.close(self.status, self.message)


def _versions() -> dict:
    import platform

    from kvviz import FORMAT_VERSION, __version__

    return {"kvviz": __version__, "format_version": FORMAT_VERSION,
            "python": platform.python_version()}


def open_store_sink(path: Path, url: str, *, nvml: str = "auto",
                    scrape: dict | None = None, extra_meta: dict | None = None) -> StoreSink:
    """Record NodeSamples into a kvviz recording (.db); the context gives the sink."""
    return StoreSink(path, url, nvml=nvml, scrape=scrape, extra_meta=extra_meta)


def _open_out(args: argparse.Namespace, url: str) -> AbstractContextManager:
    from kvviz.node.scrape import JsonlSink

    path = args.out
    if path is None:
        return nullcontext(None)
    if path.suffix == ".jsonl":
        safeio.check_output(path, "--out", overwrite=False, append=True,
                            is_ours=_is_scrape_log, kind_name="kvviz scrape log")
        return JsonlSink(path)
    if path.suffix == ".db":
        safeio.check_output(path, "--out", overwrite=False, is_ours=safeio.is_kvviz_recording,
                            kind_name="kvviz recording")
        scrape = {"interval_s": args.interval, "timeout_s": args.timeout,
                  "duration_s": args.duration, "count": args.count}
        return open_store_sink(path, url, nvml=args.nvml, scrape=scrape)
    raise KvvizError(f"--out {safeio.printable(path)}: expected a .jsonl or .db file")


def _is_scrape_log(path: Path) -> bool:
    """A JSONL file whose first line is a NodeSample written by JsonlSink."""
    first = safeio.head(path, 65536).split(b"\n", 1)[0]
    try:
        obj = json.loads(first)
    except (ValueError, RecursionError):
        return False
    return isinstance(obj, dict) and {"time", "url", "status"} <= obj.keys()


def _pct(x: float | None) -> str:
    from kvviz.node.gauges import percent

    return percent(x)


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
    hit_text = "off" if getattr(s, "prefix_caching_off", False) else _pct(s.prefix_hit_rate)
    if s.prefix_hit_rate_interval is not None and hit_text != "off":  # both, each named
        hit_text = (f"{_pct(s.prefix_hit_rate_interval)} last {s.interval_s or 0:.0f}s, "
                    f"{hit_text} since start")
    return (f"{stamp} ok {s.engine} kv {_pct(s.kv_usage)}{slots} run {_num(s.num_running)} "
            f"wait {_num(s.num_waiting)} preempt {_num(s.preemptions_total)}{rate} "
            f"prefix hit {hit_text}" + (f"; {s.message}" if s.message else ""))


def run(args: argparse.Namespace) -> int:
    """Exit 0 when at least one scrape succeeded, 1 when none did, 2 on bad arguments."""
    from kvviz.node.scrape import Scraper, normalize_url

    if args.count is not None and args.count < 1:
        raise KvvizError(f"--count must be >= 1, got {args.count}")
    url = normalize_url(args.url)
    from kvviz.runs import lifecycle

    lifecycle.watch(command="scrape")  # started by the dashboard: stop when it is gone
    ok = 0
    stop = threading.Event()
    stopped_by: list[str] = []

    def on_signal(signum: int, _frame: object) -> None:
        stopped_by.append(signal.Signals(signum).name)
        stop.set()

    unbounded = args.count is None and args.duration is None
    failed: list[int] = [0]  # failed scrapes in a row
    if unbounded and not args.quiet and sys.stderr.isatty():  # errors stay one line
        print(f"kvviz scrape: scraping {safeio.printable(url)} every {args.interval:g} s until "
              f"Ctrl-C (or SIGTERM); gives up after {args.give_up} failed scrapes in a row",
              file=sys.stderr, flush=True)

    with _open_out(args, url) as recorder:
        def sink(sample) -> None:
            nonlocal ok
            ok += sample.ok
            failed[0] = 0 if sample.ok else failed[0] + 1
            if unbounded and failed[0] >= args.give_up:
                stop.set()
            if recorder is not None:
                recorder(sample)
            if not args.quiet:
                line = (json.dumps(sample.to_dict()) if args.json
                        else safeio.printable(format_line(sample)))
                print(line, flush=True)

        scraper = Scraper(url, sink, interval_s=args.interval, duration_s=args.duration,
                          timeout_s=args.timeout, max_samples=args.count, stop=stop)
        old = {}
        if threading.current_thread() is threading.main_thread():
            old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            n = scraper.run()
        finally:
            for s, h in old.items():
                signal.signal(s, h)
        if stopped_by and isinstance(recorder, StoreSink):
            recorder.status, recorder.message = "stopped", (
                lifecycle.stop_reason() or f"stopped by {stopped_by[0]}")
    gave_up = unbounded and failed[0] >= args.give_up and not stopped_by
    why = f" (gave up after {failed[0]} failed scrapes in a row)" if gave_up else ""
    if not ok:
        print(f"kvviz scrape: no successful scrape of {safeio.printable(url)} in {n} tries"
              + why, file=sys.stderr)
        return 1
    if gave_up:
        print(f"kvviz scrape: warning: the node stopped answering{why}", file=sys.stderr)
    return 0
