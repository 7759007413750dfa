"""`kvviz torch-snapshot FILE`: fragmentation of a torch CUDA memory snapshot, read safely."""
from __future__ import annotations

import argparse
import json

from kvviz.core import limits as at
from kvviz.core import safeio

HELP = ("summarize a torch.cuda.memory._dump_snapshot() pickle (holes, rounding waste, "
        "fragmentation) without executing it")
MAX_ROWS = 40
MAX_MB = at.float_range(0.0, 4096.0, lo_open=True)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="snapshot pickle written by torch.cuda.memory._dump_snapshot")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--all", action="store_true",
                   help=f"list every segment (default: the {MAX_ROWS} with the most free bytes)")
    p.add_argument("--max-mb", type=MAX_MB, default=None, metavar="MB",
                   help=at.rng("refuse files larger than this (default 256)", MAX_MB))


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def shown(text: str) -> str:
    """Text from the file, safe for a terminal: control characters escaped."""
    return text.encode("unicode_escape").decode("ascii") if not text.isprintable() else text


def format_table(summary, name: str, show_all: bool = False) -> str:
    hb = human_bytes
    name = shown(name)
    segs = list(summary.segments)
    if not show_all and len(segs) > MAX_ROWS:
        segs = sorted(segs, key=lambda s: -s.free)[:MAX_ROWS]
        segs.sort(key=lambda s: s.index)
    head = (f"{'seg':>4} {'dev':>3} {'address':>14} {'type':>5} {'total':>10} {'allocated':>10} "
            f"{'holes':>5} {'free':>10} {'largest hole':>12} {'rnd waste':>10} {'ext frag':>8}")
    lines = [f"{name}: {len(summary.segments)} segments, {hb(summary.reserved)} reserved", head]
    for s in segs:
        dev = "-" if s.device is None else str(s.device)
        kind = shown(s.segment_type[:5])
        lines.append(
            f"{s.index:>4} {dev:>3} {s.address:>#14x} {kind:>5} {hb(s.total):>10} "
            f"{hb(s.allocated):>10} {s.holes:>5} {hb(s.free):>10} {hb(s.largest_hole):>12} "
            f"{hb(s.rounding_waste):>10} {s.external_fragmentation:>8.3f}")
    if len(segs) < len(summary.segments):
        lines.append(f"... {len(summary.segments) - len(segs)} more segments (--all lists them)")
    waste_note = "" if summary.requested_known else " (requested_size missing: lower bound)"
    lines.append("")
    lines.append(f"reserved        {hb(summary.reserved)}")
    lines.append(f"allocated       {hb(summary.allocated)}  (requested {hb(summary.requested)},"
                 f" rounding waste {hb(summary.rounding_waste)}{waste_note})")
    lines.append(f"pending free    {hb(summary.pending_free)}")
    lines.append(f"free in holes   {hb(summary.free)} in {summary.holes} holes,"
                 f" largest {hb(summary.largest_hole)}")
    lines.append(f"external fragmentation index  {summary.external_fragmentation:.3f}"
                 "  (1 - largest hole / free)")
    for pool, p in summary.pools.items():
        lines.append(f"  {shown(pool):<6} pool: {p['segments']} segments, "
                     f"{hb(p['reserved'])} reserved, "
                     f"{hb(p['free'])} free, largest hole {hb(p['largest_hole'])}, "
                     f"index {p['external_fragmentation']:.3f}")
    if summary.uncovered:
        lines.append(f"bytes in segments no block describes: {hb(summary.uncovered)}")
    if summary.trace_entries:
        lines.append(f"allocator trace entries: {summary.trace_entries} (not analysed)")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from kvviz.torchsnap import DEFAULT_MAX_BYTES, load_snapshot_sandboxed, summarize
    from kvviz.torchsnap.safe_pickle import SnapshotFormatError

    if args.max_mb is not None and not args.max_mb > 0:
        raise SnapshotFormatError(f"--max-mb must be > 0, got {args.max_mb}")
    max_bytes = DEFAULT_MAX_BYTES if args.max_mb is None else int(args.max_mb * 1024 * 1024)
    safeio.check_input_file(args.file, "snapshot")  # a FIFO or device would block the read
    # parsed in a child with memory/CPU/time limits: no file can take this process down
    summary = summarize(load_snapshot_sandboxed(args.file, max_bytes=max_bytes))
    if args.json:
        print(json.dumps({"file": str(args.file), **summary.to_dict()}))
    else:  # names and segment types come from the file: escape terminal control characters
        table = format_table(summary, str(args.file), show_all=args.all)
        print("\n".join(safeio.printable(line) for line in table.split("\n")))
    return 0
