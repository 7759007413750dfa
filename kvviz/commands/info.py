"""`kvviz info RUN.db [--json]`: what a recording holds (lanes, duration, failures, status)."""
from __future__ import annotations

import argparse
import json
import time

from kvviz.core import safeio
from kvviz.store.liveness import STOPPED_UNEXPECTEDLY, age_text

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
            s["url"] = r.meta.get("url")
            s["node_samples_ok"] = int((nodes["status"] == "ok").sum()) if len(nodes) else 0
            if len(nodes) and "t" in nodes:
                t = nodes["t"].astype(float)
                s["duration_s"] = float(t.max() - t.min())
        s["kv_events"] = r.kv_counts()
        if s["kv_events"] and not s["samples"] and not s["node_samples"]:
            s["duration_s"] = s["kv_events"]["span_s"]
    finally:
        r.close()
    return s


def run(args: argparse.Namespace) -> int:
    from kvviz.core.errors import StoreError

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
    out(f"{s['path']}: {s.get('state', s['status'])}{msg}")
    kv = s.get("kv_events") or {}
    if s["mode"] == "node":
        held = (f"{s['node_samples']} scrapes ({s.get('node_samples_ok', 0)} ok) of "
                f"{safeio.printable(str(s.get('url') or 'a node'))[:200]}")
    elif s["mode"] == "kv-events" or (kv and not s["samples"]):
        held = f"{kv.get('batches', 0)} KV-event batches"
    else:
        held = (f"{s['samples']} samples, {s['events']} engine events, block-map stride "
                f"{s['blockmap_stride']}")
    where = "" if s["device"] in (None, "node") else f" on {s['device']}"
    out(f"  {s['mode']} recording{where}, format {s['format_version']}, "
        f"{_num(s['duration_s'], '.1f')} s, {held}")
    if kv:
        from kvviz.store.contents import kv_line

        out("  " + kv_line(kv))
    age = s["heartbeat_age_s"]
    if s["status"] in ("running", STOPPED_UNEXPECTEDLY) and isinstance(age, (int, float)):
        out(f"  last heartbeat {age_text(time.time() - age)}"
            + (" (writer probably killed)" if abs(age) > 10 else ""))
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
