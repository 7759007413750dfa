"""`kvviz events ENDPOINT...`: subscribe to serving engines' KV-event streams and record them."""
from __future__ import annotations

import argparse
import gc
import json
import signal
import sys
import time
from pathlib import Path

from kvviz.core import limits as at
from kvviz.core.errors import KvvizError
from kvviz.core.safeio import printable
from kvviz.node.kvevents.endpoints import MAX_MESSAGE_MB as MAX_MB
from kvviz.node.kvevents.endpoints import RECEIVE_BUDGET

HELP = "record the KV-cache event streams (ZeroMQ) of vLLM / SGLang / TensorRT-LLM nodes"
WAIT_S = 3.0  # a stream with nothing decodable by then gets a message
COMMIT_S = 0.5
MAX_MESSAGE_MB = at.float_range(0.001, float(MAX_MB))


def add_arguments(p: argparse.ArgumentParser) -> None:
    a = p.add_argument
    a("endpoints", nargs="+", metavar="ENDPOINT",
      help="a publisher's address, e.g. tcp://10.0.0.7:5557 (one per pod)")
    a("--dp-ranks", type=int, default=1, metavar="N",
      help="data-parallel ranks per endpoint: rank r publishes on port + r (default 1)")
    a("--replay", action="append", default=None, metavar="ENDPOINT",
      help="the publisher's ROUTER replay address, used to fill gaps (one per endpoint)")
    a("--topic", default="", help="only messages whose topic starts with this (default: all)")
    a("--out", type=Path, default=None, metavar="FILE",
      help="recording to create (default runs/events-<UTC time>.db; never overwritten)")
    a("--duration", type=at.SECONDS, default=None, metavar="S",
      help=at.rng("stop after S seconds (default: until Ctrl-C / SIGTERM)", at.SECONDS))
    a("--max-message-mb", type=MAX_MESSAGE_MB, default=float(MAX_MB), metavar="MB",
      help=at.rng(f"a message frame larger than this drops the connection before it is "
                  f"buffered (default and most {MAX_MB}; many streams share a "
                  f"{RECEIVE_BUDGET >> 20} MB receive budget, which may lower it). It bounds "
                  "memory: the process stays under 1 GB whatever the publishers send (on "
                  "Linux, messages of many frames that ZeroMQ would hold past that end the "
                  "command with an error: docs/RELIABILITY.md)", MAX_MESSAGE_MB))
    a("--json", action="store_true", help="print one JSON object per stream when stopping")
    a("--quiet", action="store_true", help="no per-second status line")


def _meta(args: argparse.Namespace, t0: float) -> dict:
    from kvviz import FORMAT_VERSION, __version__

    return {"mode": "kv-events", "device": "node", "lanes": [],
            "kv_events": {"endpoints": args.endpoints, "dp_ranks": args.dp_ranks,
                          "replay": args.replay or [], "topic": args.topic},
            "versions": {"kvviz": __version__, "format_version": FORMAT_VERSION},
            "started_unix": t0}


def run(args: argparse.Namespace) -> int:
    """SIGINT / SIGTERM are caught first thing, so one that arrives while the recording is
    being set up still closes it as stopped."""
    stop: list[str] = []
    old = {s: signal.signal(s, lambda n, _f: stop.append(signal.Signals(n).name))
           for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        return _record(args, stop)
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _record(args: argparse.Namespace, stop: list[str]) -> int:
    from kvviz.node.kvevents.endpoints import check_fd_limit
    from kvviz.node.kvevents.guard import MemoryGuard
    from kvviz.node.kvevents.subscriber import Subscriber, SubscriberConfig
    from kvviz.runs import lifecycle
    from kvviz.store.writer import RunWriter

    if args.duration is not None and not args.duration > 0:
        raise ValueError(f"--duration: must be > 0, got {args.duration}")
    cfg = SubscriberConfig(tuple(args.endpoints), args.dp_ranks, tuple(args.replay or ()),
                           args.topic, max_message_bytes=int(args.max_message_mb * 2**20))
    check_fd_limit(len(cfg.endpoints) * cfg.dp_ranks)  # before any file or socket exists
    out: Path = args.out or Path("runs") / time.strftime("events-%Y%m%dT%H%M%SZ.db", time.gmtime())
    if out.exists():
        raise KvvizError(f"--out {out}: already exists (choose another name)")
    if out.is_dir() or not out.parent.is_dir():
        if out.parent == Path("runs") and not out.parent.exists():
            out.parent.mkdir()
        else:
            raise KvvizError(f"--out {out}: directory {out.parent} does not exist")
    t0 = time.time()
    lifecycle.watch(command="events")  # started by the dashboard: stop when it is gone
    writer = RunWriter(out, _meta(args, t0))
    status, message, sub = "finished", "duration reached", None
    end = None if args.duration is None else time.monotonic() + args.duration
    guard = MemoryGuard(prog="kvviz events")  # this process is the command's own
    try:
        kv = writer.kv_events()
        sub = Subscriber(cfg, kv, guard=guard)
        if sub.frame_bytes < cfg.max_message_bytes:
            print(f"kvviz events: warning: {len(sub.streams)} streams share the "
                  f"{RECEIVE_BUDGET >> 20} MB receive budget: a frame over "
                  f"{sub.frame_bytes / 2**20:.2f} MB drops its connection (--max-message-mb "
                  f"{args.max_message_mb:g} lowered)", file=sys.stderr, flush=True)
        sub.should_stop = lambda: bool(stop) or end is not None and time.monotonic() >= end
        status, message = _loop(args, sub, kv, writer, stop)
    except ValueError as exc:  # a stream that cannot be set up, or the memory guard tripped
        # (MemoryLimit, the sockets closed): one line, the run closed
        status, message = "error", str(exc)
    except BaseException as exc:
        status, message = "error", f"{type(exc).__name__}: {exc}"
        raise
    finally:
        if sub is not None:
            for st, summ in zip(sub.streams, sub.summary()):
                kv.set_stream(st.sid, st.encoding, st.first_t, summ)
            kv.flush()
            sub.close()
        try:
            writer.close(status, message)
        finally:
            guard.close()
        gc.freeze()  # the recording is closed: exit without a collection over the model
    if status == "error":
        print(f"kvviz events: error: {printable(message)}", file=sys.stderr)
        return 2
    if args.json and sub is not None:
        for summ in sub.summary():
            print(json.dumps(summ), flush=True)
    return 0


def _loop(args, sub, kv, writer, stop: list[str]) -> tuple[str, str]:
    start = time.monotonic()
    warned: set[int] = set()
    last_commit = last_line = start
    while True:
        sub.poll(50)
        now = time.monotonic()
        if now - last_commit >= COMMIT_S:
            kv.flush()
            writer.commit()
            last_commit = now
        if now - start >= WAIT_S and len(warned) < len(sub.streams):
            probs = sub.problems()
            if probs and len(probs) == len(sub.streams) and all(d for d, _ in probs.values()):
                return "error", "; ".join(m for _, m in probs.values())
            for sid, (_, msg) in probs.items():
                if sid not in warned:
                    print(f"kvviz events: warning: {msg}", file=sys.stderr, flush=True)
                    warned.add(sid)
            warned |= {st.sid for st in sub.streams if st.batches}
        if args.duration is not None and now - start >= args.duration:
            return "finished", "duration reached"
        if stop:
            from kvviz.runs import lifecycle

            return "stopped", lifecycle.stop_reason() or f"stopped by {stop[-1]}"
        if not args.quiet and now - last_line >= 1.0:
            last_line = now
            parts = [f"{s['endpoint']}: {s['events']} ev, {s['cached_blocks']} cached, "
                     f"{s['gaps']} gaps" for s in sub.summary()]
            print(f"[{now - start:6.1f}s] " + " | ".join(parts), file=sys.stderr, flush=True)

