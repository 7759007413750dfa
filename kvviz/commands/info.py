"""`kvviz info RUN.db [--json]`: what a recording holds (lanes, duration, failures, status)."""
from __future__ import annotations

import argparse
import json

from kvviz import safeio

HELP = "summarize a recording: lanes, duration, samples, admission failures, status"
# what reading a hand-edited recording can raise besides StoreError (wrong types, deep JSON)
DAMAGED = (TypeError, KeyError, AttributeError, IndexError, OverflowError, RecursionError)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", metavar="RUN.db", help="a recording written by kvviz collect or scrape")
    p.add_argument("--json", action="store_true", help="one JSON object")


def _num(v: object, fmt: str) -> str:
    """A number as `fmt`, or the value escaped when a damaged recording holds something else."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return format(v, fmt)
    return safeio.printable(repr(v))[:40]


def read_summary(path: str) -> dict:
    """The reader's summary plus node samples (a `kvviz scrape --out` recording)."""
    from kvviz.store.reader import RunReader

    safeio.check_input_file(path, "recording")
    r = RunReader(path)
    try:
        s = r.summary()
        if s.get("mode") == "node":
            nodes = r.node_samples()
            s["node_samples"] = len(nodes)
            if len(nodes) and "t" in nodes:
                t = nodes["t"].astype(float)
                s["duration_s"] = float(t.max() - t.min())
    finally:
        r.close()
    return s


def run(args: argparse.Namespace) -> int:
    from kvviz.errors import StoreError

    try:
        s = read_summary(args.run)
    except DAMAGED as exc:  # a hand-edited or damaged field the reader did not catch
        raise StoreError(f"{args.run}: damaged recording ({type(exc).__name__}: "
                         f"{str(exc)[:200]})") from None
    if args.json:
        print(json.dumps(s, default=str))
        return 0
    out = _say
    msg = f" ({s['status_message']})" if s["status_message"] else ""
    out(f"{s['path']}: {s['status']}{msg}")
    samples = f"{s['samples']} samples"
    if "node_samples" in s:
        samples = f"{s['node_samples']} node samples"
    out(f"  {s['mode']} mode on {s['device']}, format {s['format_version']}, "
        f"{_num(s['duration_s'], '.1f')} s, {samples}, {s['events']} events, "
        f"block-map stride {s['blockmap_stride']}")
    age = s["heartbeat_age_s"]
    if s["status"] == "running" and isinstance(age, (int, float)):
        out(f"  last heartbeat {age:.1f} s ago"
            + (" (writer probably killed)" if age > 10 else ""))
    for name, lane in s["lanes"].items():
        f = lane["failures"]
        mib = lane["blockmap_bytes"] / 2**20 if isinstance(lane["blockmap_bytes"], int) else None
        out(f"  {name}: {lane['samples']} samples, {lane['blockmaps']} block maps "
            f"({_num(mib, '.2f')} MiB), failures capacity {f['capacity']} "
            f"fragmentation {f['fragmentation']} policy {f['policy']}, preemptions "
            f"{lane['preemptions']}, tokens {lane['tokens_generated']}")
    return 0


def _say(line: str) -> None:
    """print() one line, control characters from the recording escaped."""
    print(safeio.printable(line))
