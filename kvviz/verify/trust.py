"""What the verifier trusts of a file before it reads it: nothing (issue 40, item 4).

Stdlib and numpy only, like the rest of kvviz/verify. The file's kind is named (a FIFO, a
directory, a device: never "no such file", never opened), a format version this verifier does
not know is a failure (as `kvviz info` and `export` refuse it), every string printed from the
file is escaped, and the lanes' block sizes, block counts and the maps' owners are checked
against their ranges (docs/FORMAT.md, "Bounds"): a value outside is a mismatch.
"""
from __future__ import annotations

import math
import os
import stat
import time
from pathlib import Path

import numpy as np

KNOWN_VERSIONS = range(1, 6)  # the format versions this verifier checks (kvviz writes 5)
MAX_BLOCK_SIZE = (1 << 31) - 1
MAX_BLOCKS = 1 << 24  # kvviz refuses larger lanes (rows.MAX_BLOCKS)
MAX_OWNER = (1 << 31) - 2  # an owner is -1 (free) or a sequence id; id + 1 still fits int32
FREE = -1
KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
         (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
         (stat.S_ISSOCK, "a socket"))


def printable(text: object) -> str:
    """`text` with control and format characters (terminal escapes, bidi overrides, newlines)
    written as \\xNN / \\uNNNN: a string from a file prints as one inert line."""
    s = str(text)
    if s.isprintable():
        return s
    return "".join(ch if ch.isprintable() else
                   f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else
                   f"\\u{ord(ch):04x}" if ord(ch) < 0x10000 else f"\\U{ord(ch):08x}"
                   for ch in s)


def path_problem(path: Path) -> str | None:
    """Why `path` is not a regular file to open (None when it is); checked without opening
    it, so a FIFO never blocks."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return "no such file"
    except OSError as exc:
        return f"cannot access ({exc.strerror or type(exc).__name__})"
    if stat.S_ISREG(st.st_mode):
        return None
    kind = next((name for test, name in KINDS if test(st.st_mode)), "not a regular file")
    return f"is {kind}, not a recording (a regular file)"


def version_problem(version: int) -> str | None:
    """Why a format version is not one this verifier checks (None when it is)."""
    if version in KNOWN_VERSIONS:
        return None
    return (f"format version {version} is not one this verifier knows "
            f"({KNOWN_VERSIONS.start}..{KNOWN_VERSIONS.stop - 1}): nothing in it can be checked")


def _int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def meta_lanes(meta: dict) -> list[tuple[str, str]]:
    """(where, what) for each run.meta lane field outside its range: block_size in
    1..2^31 - 1, num_blocks in 0..2^24, capacity_tokens >= 1 (each when present)."""
    out = []
    for i, lane in enumerate(meta.get("lanes", [])):
        where = f"run.meta lanes[{i}] ({printable(str(lane.get('name', '')))[:60]})"
        for key, lo, hi in (("block_size", 1, MAX_BLOCK_SIZE), ("num_blocks", 0, MAX_BLOCKS),
                            ("capacity_tokens", 1, MAX_BLOCK_SIZE * MAX_BLOCKS)):
            if key not in lane:
                continue
            v = lane[key]
            if not _int(v) or not lo <= v <= hi:
                out.append((where, f"{key} {printable(repr(v))[:40]} is outside {lo}..{hi}"))
    return out


def map_vs_lane(row: dict, lane: dict) -> list[str]:
    """A block map's block_size and num_blocks against its lane's in run.meta."""
    out = []
    for key in ("block_size", "num_blocks"):
        want = lane.get(key)
        if _int(want) and row.get(key) != want:
            out.append(f"{key} {row.get(key)!r} differs from its lane's {want} in run.meta")
    return out


def owners(owner: np.ndarray) -> list[str]:
    """Owners past MAX_OWNER (those below -1 break checks.invariants' first rule)."""
    bad = owner > MAX_OWNER
    if not bad.any():
        return []
    i = int(np.flatnonzero(bad)[0])
    return [f"{int(bad.sum())} owners are outside -1 (free) and 0..{MAX_OWNER} (first: block "
            f"{i}, owner {int(owner[i])})"]


def age(beat: object) -> str:
    """", last commit N s ago" (or "in the future"); "" for no finite heartbeat."""
    if isinstance(beat, bool) or not isinstance(beat, (int, float)) or not math.isfinite(beat):
        return ""
    ago = time.time() - beat
    return (f", last commit in the future (by {-ago:.3g} s)" if ago < -1.0
            else f", last commit {max(0.0, ago):.1f} s ago")
