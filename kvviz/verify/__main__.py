"""`python -m kvviz.verify RUN.db [--json]`: exit 0 clean, 1 mismatches, 2 unreadable."""
from __future__ import annotations

import argparse
import json
import sys

from kvviz.verify.core import Report, Unreadable, verify
from kvviz.verify.rows import MAX_EVENTS
from kvviz.verify.trust import printable

HOLDS = (("samples", "samples"), ("events", "engine events"), ("node_samples", "scrapes"),
         ("kv_streams", "KV-event streams"), ("kv_batches", "KV-event batches"),
         ("kv_events", "KV events"), ("kv_batches_undecodable", "undecodable batches"),
         ("kv_gaps", "gaps"), ("kv_restarts", "publisher restarts"))


def summary(rep: Report) -> str:
    lines = [f"{rep.path}: format {rep.format_version}, status {rep.status}, "
             f"{rep.checks} checks, {rep.mismatch_count} mismatches"]
    if rep.note:
        lines.append(f"  {rep.note}")
    held = [f"{rep.contents[k]} {words}" for k, words in HOLDS if k in rep.contents]
    span = rep.contents.get("kv_span_s", rep.contents.get("node_span_s"))
    if held:
        lines.append("  holds " + ", ".join(held)
                     + ("" if span is None else f", over {span:.1f} s"))
    for lane, s in rep.lanes.items():
        lines.append(f"  {lane}: {s['samples']} samples, {s.get('maps_decoded', 0)} of "
                     f"{s['maps']} block maps decoded, {s.get('tables_checked', 0)} block "
                     f"tables checked, {s['events']} events replayed")
    for m in rep.mismatches:
        lines.append(f"  MISMATCH {m}")
    if rep.mismatch_count > len(rep.mismatches):
        lines.append(f"  ... and {rep.mismatch_count - len(rep.mismatches)} more")
    return "\n".join(printable(line) for line in lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="kvviz verify", description=__doc__)
    p.add_argument("path", help="a recording (RUN.db)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--max-events", type=int, default=MAX_EVENTS, metavar="N",
                   help=f"refuse (exit 2) a recording whose event chunks overlap in more "
                        f"engine events than this (default {MAX_EVENTS}; kvviz's overlap only "
                        "within one sample; about 100 bytes of memory each). Events are "
                        "read one at a time: the recording's length needs no more")
    args = p.parse_args(argv)
    if args.max_events < 1:
        p.error("--max-events must be >= 1")
    try:
        rep = verify(args.path, args.max_events)
    except Unreadable as exc:
        print(f"kvviz verify: error: {printable(exc)}", file=sys.stderr)
        return 2
    try:
        print(json.dumps(rep.as_dict(), indent=1) if args.json else summary(rep), flush=True)
    except BrokenPipeError:  # `... | head`: the reader left; the exit status still tells
        sys.stdout = None
    return 0 if rep.mismatch_count == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
