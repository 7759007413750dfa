"""Snapshot parsing in a limited child process (kvviz.core.sandbox): what the CLI and pages call.

safe_loads already refuses globals, deep nesting and hashing bombs; the child is the second
wall: whatever a file does to the parser (an unforeseen C recursion, a hash flood, memory
growth), the caller gets one SandboxError naming the file, never a dead server. The child
sends back the validated Snapshot as plain lists (JSON), rebuilt here into the same records.

Limits grow with the file: a snapshot needs ~10x its size in memory and 0.2-0.7 s per MB to
read (docs/RELIABILITY.md), so a file of S MiB gets max(1 GiB, 512 MiB + 24 S) of memory,
20 s + 1 s/MiB of CPU and 30 s + 2 s/MiB of wall time (room for a loaded machine). Results
(and refusals) are cached by content hash / file identity, so a page that reruns does not
parse the same file again.
"""
from __future__ import annotations

import hashlib
import os
import stat
import threading
from collections import OrderedDict
from pathlib import Path

from kvviz.core.sandbox import SandboxError, run_limited
from kvviz.torchsnap.errors import SnapshotFormatError
from kvviz.torchsnap.safe_pickle import (
    DEFAULT_MAX_BYTES,
    SnapBlock,
    SnapSegment,
    Snapshot,
    load_snapshot,
    loads_snapshot,
)

_CACHE: OrderedDict[tuple, Snapshot | SandboxError] = OrderedDict()
_CACHE_SIZE = 8
_CACHE_LOCK = threading.Lock()  # the dashboard's sessions share it; parses run outside it


def parse_limits(nbytes: int) -> dict[str, float]:
    """mem_mb, cpu_s and wall_s for parsing a snapshot of nbytes bytes."""
    mib = nbytes / 2**20
    return {"mem_mb": max(1024.0, 512 + 24 * mib), "cpu_s": 20 + mib, "wall_s": 30 + 2 * mib}


def snapshot_to_plain(snap: Snapshot) -> dict:
    return {"trace_entries": snap.trace_entries, "segments": [
        {"address": s.address, "total_size": s.total_size, "segment_type": s.segment_type,
         "device": s.device,
         "blocks": [[b.offset, b.size, b.requested_size, b.state] for b in s.blocks]}
        for s in snap.segments]}


def snapshot_from_plain(d: object, name: str) -> Snapshot:
    try:
        segs = tuple(SnapSegment(
            address=int(s["address"]), total_size=int(s["total_size"]),
            segment_type=str(s["segment_type"]),
            device=None if s["device"] is None else int(s["device"]),
            blocks=tuple(SnapBlock(int(o), int(z), None if r is None else int(r), str(st))
                         for o, z, r, st in s["blocks"]))
            for s in d["segments"])
        return Snapshot(segments=segs, trace_entries=int(d["trace_entries"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise SnapshotFormatError(f"{name}: the parser sent back a malformed result ({exc})") \
            from None


def parse_bytes_plain(data: bytes, name: str, max_bytes: int) -> dict:
    """Runs in the child."""
    return snapshot_to_plain(loads_snapshot(data, name=name, max_bytes=max_bytes))


def parse_file_plain(path: str, max_bytes: int) -> dict:
    """Runs in the child."""
    return snapshot_to_plain(load_snapshot(path, max_bytes=max_bytes))


def _cached(key: tuple, name: str, nbytes: int, func, *args) -> Snapshot:
    with _CACHE_LOCK:
        got = _CACHE.get(key)
        if got is not None:
            _CACHE.move_to_end(key)
    if got is None:
        try:
            plain = run_limited(func, *args, label=name, **parse_limits(nbytes))
            got = snapshot_from_plain(plain, name)
        except SandboxError as exc:
            got = exc
        with _CACHE_LOCK:
            _CACHE[key] = got
            while len(_CACHE) > _CACHE_SIZE:
                _CACHE.popitem(last=False)
    if isinstance(got, SandboxError):
        raise SandboxError(str(got), got.kind, got.error_type)
    return got


def loads_snapshot_sandboxed(data: bytes, *, name: str = "upload",
                             max_bytes: int = DEFAULT_MAX_BYTES) -> Snapshot:
    """loads_snapshot in a limited child. Raises SnapshotFormatError or SandboxError."""
    if len(data) > max_bytes:
        raise SnapshotFormatError(f"{name}: {len(data):,} bytes is over the {max_bytes:,} limit")
    key = ("bytes", hashlib.sha256(data).hexdigest(), name, max_bytes)
    return _cached(key, name, len(data), parse_bytes_plain, data, name, max_bytes)


def load_snapshot_sandboxed(path: str | os.PathLike, *,
                            max_bytes: int = DEFAULT_MAX_BYTES) -> Snapshot:
    """load_snapshot in a limited child; refuses anything that is not a regular file first."""
    p = Path(path)
    st = p.stat()
    if not stat.S_ISREG(st.st_mode):
        raise SnapshotFormatError(f"{p}: not a regular file")
    if st.st_size > max_bytes:
        raise SnapshotFormatError(
            f"{p}: {st.st_size:,} bytes is over the {max_bytes:,}-byte limit for a snapshot")
    key = ("file", str(p.resolve()), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns,
           max_bytes)
    return _cached(key, str(p), st.st_size, parse_file_plain, str(p), max_bytes)
