"""`kvviz info RUN.db [--json]`: what a recording holds (lanes, duration, failures, status)."""
from __future__ import annotations

import argparse
import json

HELP = "summarize a recording: lanes, duration, samples, admission failures, status"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", metavar="RUN.db", help="a recording written by kvviz collect")
    p.add_argument("--json", action="store_true", help="one JSON object")


def run(args: argparse.Namespace) -> int:
    from kvviz.store.reader import RunReader

    r = RunReader(args.run)
    try:
        s = r.summary()
    finally:
        r.close()
    if args.json:
        print(json.dumps(s, default=str))
        return 0
    msg = f" ({s['status_message']})" if s["status_message"] else ""
    print(f"{s['path']}: {s['status']}{msg}")
    print(f"  {s['mode']} mode on {s['device']}, format {s['format_version']}, "
          f"{s['duration_s']:.1f} s, {s['samples']} samples, {s['events']} events, "
          f"block-map stride {s['blockmap_stride']}")
    if s["status"] == "running" and s["heartbeat_age_s"] is not None:
        print(f"  last heartbeat {s['heartbeat_age_s']:.1f} s ago"
              + (" (writer probably killed)" if s["heartbeat_age_s"] > 10 else ""))
    for name, lane in s["lanes"].items():
        f = lane["failures"]
        print(f"  {name}: {lane['samples']} samples, {lane['blockmaps']} block maps "
              f"({lane['blockmap_bytes'] / 2**20:.2f} MiB), failures capacity {f['capacity']} "
              f"fragmentation {f['fragmentation']} policy {f['policy']}, preemptions "
              f"{lane['preemptions']}, tokens {lane['tokens_generated']}")
    return 0
