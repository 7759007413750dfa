"""`kvviz attach URL [--kv-events ENDPOINT]`: one node's /metrics and KV-event stream recorded
together into ONE recording (mode "node" with kv_* tables), so the two are known to belong to
one node and the dashboard may combine them (docs/NODE.md).

The scrape runs in a process of its own (kvviz/node/scrape_child.py: its own memory limit,
series cap and deadline), so a hostile /metrics can neither block the subscriber's polling nor
count against the KV-event memory guard; SIGTERM and --duration end attach at once, whatever a
scrape is doing. A status line a second on
stderr; a change of state (the node stops answering, answers again, an events endpoint that is
not a KV-event publisher) is one line of its own. The recording keeps what arrived.
Exit 0 after a run with at least one successful scrape, 1 when none succeeded or the events
endpoint is definitely not a publisher, 2 on bad flags.
"""
from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from pathlib import Path

from kvviz.core import limits as at
from kvviz.core import safeio
from kvviz.core.errors import KvvizError

HELP = "record a vLLM/SGLang node's /metrics and its KV-event stream into one recording"
WAIT_S = 3.0  # a stream with nothing decodable by then gets a message
COMMIT_S = 0.5
INFO_TIMEOUT_S = 30.0  # vLLM's first /server_info collects its environment (seconds)


def add_arguments(p: argparse.ArgumentParser) -> None:
    a = p.add_argument
    a("url", help="the node's metrics URL, e.g. localhost:8000 or http://h:8000/metrics")
    a("--kv-events", default=None, metavar="ENDPOINT",
      help="the node's KV-event publisher, e.g. tcp://10.0.0.7:5557 or ipc:///tmp/kv.ipc "
           "(vLLM --kv-events-config endpoint; default: scrape only)")
    a("--replay", action="append", default=None, metavar="ENDPOINT",
      help="its ROUTER replay address (vLLM replay_endpoint): fills gaps and, when kvviz "
           "joins late, the batches published before it joined (once: attach follows one "
           "publisher; `kvviz events` takes several)")
    a("--topic", default="", help="only events whose topic starts with this (default: all)")
    a("--interval", type=at.SECONDS, default=2.0, metavar="S",
      help=at.rng("seconds between scrapes (default 2)", at.SECONDS))
    a("--timeout", type=at.TIMEOUT, default=3.0, metavar="S",
      help=at.rng("give up on one scrape after this many seconds (default 3)", at.TIMEOUT))
    a("--duration", type=at.SECONDS, default=None, metavar="S",
      help=at.rng("stop after this many seconds (default: until Ctrl-C / SIGTERM)",
                  at.SECONDS))
    a("--out", type=Path, default=None, metavar="FILE.db",
      help="recording to create (default runs/node-<UTC time>.db; never overwritten)")
    a("--nvml", choices=("auto", "always", "never"), default="auto",
      help="also record this machine's GPU memory (NVML); auto: only when the URL is a "
           "loopback address (default)")
    a("--blocks", action="append", default=None, metavar="ENDPOINT",
      help="the kvviz plugin's block stream inside the node (KVVIZ_BLOCKS_ENDPOINT, "
           "docs/NODE.md): its real block pool recorded as a lane; once per "
           "data-parallel rank")
    a("--json", action="store_true", help="print one JSON summary when stopping")
    a("--quiet", action="store_true", help="no status line (state changes are still said)")


def _out_path(args: argparse.Namespace) -> Path:
    out: Path = args.out or Path("runs") / time.strftime("node-%Y%m%dT%H%M%SZ.db", time.gmtime())
    if out.suffix != ".db":
        raise KvvizError(f"--out {safeio.printable(out)}: expected a .db file")
    if out.exists():
        raise KvvizError(f"--out {safeio.printable(out)}: already exists (choose another name)")
    if not out.parent.is_dir():
        if args.out is None:
            out.parent.mkdir(parents=True, exist_ok=True)
        else:
            raise KvvizError(f"--out {safeio.printable(out)}: directory {out.parent} does not "
                             "exist")
    return out


def run(args: argparse.Namespace) -> int:
    from kvviz.commands.scrape import open_store_sink
    from kvviz.node.kvevents.guard import MemoryGuard
    from kvviz.node.kvevents.subscriber import Subscriber, SubscriberConfig
    from kvviz.node.scrape import normalize_url
    from kvviz.node.scrape_child import ChildScraper
    from kvviz.runs import lifecycle

    url = normalize_url(args.url)
    if args.replay and len(args.replay) > 1:
        raise KvvizError("--replay given more than once: attach follows one publisher "
                         "(`kvviz events` records several)")
    args.replay = args.replay[0] if args.replay else None
    if args.replay and not args.kv_events:
        raise KvvizError("--replay needs --kv-events (the publisher it replays)")
    for endpoint in args.blocks or ():
        from kvviz.node.kvevents.endpoints import check_endpoint
        try:
            check_endpoint(endpoint)
        except ValueError as exc:
            raise KvvizError(f"--blocks {exc}") from None
    cfg = None
    if args.kv_events:
        cfg = SubscriberConfig((args.kv_events,), 1, (args.replay,) if args.replay else (),
                               args.topic)
    out = _out_path(args)
    lifecycle.watch()  # started by the dashboard: stop when it is gone (KVVIZ_PARENT_PID)
    kv_meta = None if cfg is None else {"endpoints": [args.kv_events], "dp_ranks": 1,
                                        "replay": [args.replay] if args.replay else [],
                                        "topic": args.topic}
    scrape_meta = {"interval_s": args.interval, "timeout_s": args.timeout,
                   "duration_s": args.duration, "attach": True}
    stop: list[str] = []
    old = {s: signal.signal(s, lambda n, _f: stop.append(signal.Signals(n).name))
           for s in (signal.SIGINT, signal.SIGTERM)}
    sub = kv = guard = blocks = None
    state = _State()
    try:
        with open_store_sink(out, url, nvml=args.nvml, scrape=scrape_meta,
                             extra_meta={"kv_events": kv_meta, "attach": True}) as sink:
            writer = sink.writer
            if cfg is not None:
                kv = writer.kv_events()
                guard = MemoryGuard(prog="kvviz attach")  # its own process
                sub = Subscriber(cfg, kv, guard=guard)
            if args.blocks:
                from kvviz.node.blocks_lane import BlockLanes
                blocks = BlockLanes(args.blocks, writer, sink.t0)
            scraper = ChildScraper(url, lambda s: (sink(s), state.scraped(s, url)),
                                   interval_s=args.interval, timeout_s=args.timeout)
            info = _NodeConfig(url, writer)
            try:
                status, message = _loop(args, scraper, sub, kv, writer, state, stop, blocks,
                                        info)
            finally:
                scraper.close()  # a scrape in flight is abandoned at once
                if sub is not None:
                    for st, summ in zip(sub.streams, sub.summary()):
                        kv.set_stream(st.sid, st.encoding, st.first_t, summ)  # type: ignore
                    kv.flush()  # type: ignore[union-attr]
                    writer.commit()
            sink.status, sink.message = status, message
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        if sub is not None:
            sub.close()
        if guard is not None:
            guard.close()
        if blocks is not None:
            blocks.close()
    summary = {"recording": str(out), "status": status, "message": message,
               "scrapes": state.scrapes, "ok_scrapes": state.ok,
               "streams": sub.summary() if sub is not None else [],
               "blocks": blocks.summary() if blocks is not None else None}
    if args.json:
        print(json.dumps(summary), flush=True)
    print(f"kvviz attach: {status}: {message}; {state.ok} of {state.scrapes} scrapes ok; "
          f"recording {safeio.printable(out)}", file=sys.stderr, flush=True)
    return 1 if status == "error" or not state.ok else 0


class _State:
    """What the status lines say: the latest scrape, and the node's state changes."""

    def __init__(self) -> None:
        self.scrapes = self.ok = 0
        self.last = None
        self.failing: str | None = None

    def scraped(self, s, url: str) -> None:
        from kvviz.commands.scrape import format_line

        self.scrapes += 1
        self.last = s
        if s.ok:
            self.ok += 1
            if self.failing is not None:
                _say(f"{url} answers again")
            elif self.ok == 1 and s.engine == "unknown":
                _say(f"warning: {url} answers with Prometheus text, but no vLLM or SGLang "
                     "series (is it the serving engine's /metrics?)")
            self.failing = None
        elif self.failing != s.status:
            what = "the node stopped answering" if self.ok else "cannot scrape the node"
            _say(f"{what}: {safeio.printable(format_line(s))}")
            self.failing = s.status


def _say(text: str) -> None:
    print(f"kvviz attach: {text}", file=sys.stderr, flush=True)


def _status_line(elapsed: float, state: _State, sub, blocks=None) -> str:
    from kvviz.commands.scrape import format_line

    s = state.last
    parts = [f"[{elapsed:6.1f}s]", "no scrape yet" if s is None else
             safeio.printable(format_line(s))]
    if sub is not None:
        for d in sub.summary():
            parts.append(f"| events: {d['batches']} batches, {d['cached_blocks']} cached "
                         f"blocks ({d['stored_blocks']} stored, {d['re_announced_blocks']} of "
                         f"them re-announced), {d['gaps']} gaps, {d['replayed_batches']} "
                         "replayed")
    if blocks is not None:
        parts.append(f"| blocks: {blocks.samples} samples, {blocks.gaps} gaps")
        if blocks.undrawn:  # (wire 2: after a hole, maps resume at the next key message)
            parts[-1] += f", {blocks.undrawn} without a map (waiting for whole tables)"
    return " ".join(parts)


class _NodeConfig:
    """The node's scheduler settings from vLLM's /server_info (kvviz/node/server_info.py),
    fetched in a thread of its own (it may be slow or absent) and kept as meta `node_config`
    once, when it comes."""

    def __init__(self, url: str, writer) -> None:
        import threading

        from kvviz.node import server_info

        self.writer, self.result, self.kept = writer, None, False
        self.thread = threading.Thread(target=lambda: setattr(
            self, "result", server_info.fetch(url, INFO_TIMEOUT_S)), daemon=True,
            name="kvviz-server-info")
        self.thread.start()

    def keep(self) -> None:
        if self.kept or self.thread.is_alive():
            return
        self.kept = True
        if self.result:
            conn = self.writer.conn
            meta = json.loads(conn.execute("SELECT meta FROM run WHERE id = 1").fetchone()[0])
            meta["node_config"] = self.result
            conn.execute("UPDATE run SET meta = ? WHERE id = 1", (json.dumps(meta),))
            self.writer.commit()


def _loop(args, scraper, sub, kv, writer, state: _State, stop: list[str],
          blocks=None, info: _NodeConfig | None = None) -> tuple[str, str]:
    from kvviz.node.kvevents.guard import MemoryLimit

    start = time.monotonic()
    next_scrape = start
    last_commit = last_line = start
    warned: set[int] = set()
    while True:
        now = time.monotonic()
        if now >= next_scrape and scraper.begin():  # the scrape runs in its own process
            next_scrape = max(next_scrape + args.interval, time.monotonic())
        scraper.collect()
        if sub is not None:
            try:
                sub.poll(min(50, max(0, int((next_scrape - time.monotonic()) * 1000))))
            except MemoryLimit as exc:  # the sockets are closed: the recording says why
                return "error", str(exc)
        elif blocks is None:
            scraper.collect(max(0.0, min(0.05, next_scrape - time.monotonic())))
        if blocks is not None:
            blocks.poll(0 if sub is not None else
                        min(50, max(0, int((next_scrape - time.monotonic()) * 1000))))
        if state.scrapes == 1 and state.last is not None and not state.last.ok and \
                state.last.status == "garbled":
            return "error", f"{scraper.url} is not a node's /metrics ({state.last.message})"
        if info is not None:
            info.keep()
        now = time.monotonic()
        if (kv is not None or blocks is not None) and now - last_commit >= COMMIT_S:
            if kv is not None:
                kv.flush()
            writer.commit()
            last_commit = now
        if sub is not None and now - start >= WAIT_S and len(warned) < len(sub.streams):
            probs = sub.problems()
            for sid, (definitive, msg) in probs.items():
                if definitive:
                    return "error", safeio.printable(msg)
                if sid not in warned:
                    _say(f"warning: {safeio.printable(msg)}")
                    warned.add(sid)
            warned |= {st.sid for st in sub.streams if st.batches}
        if args.duration is not None and now - start >= args.duration:
            return "finished", "duration reached"
        if stop:
            return "stopped", f"stopped by {stop[-1]}"
        if not args.quiet and now - last_line >= 1.0:
            last_line = now
            print(_status_line(now - start, state, sub, blocks), file=sys.stderr, flush=True)
