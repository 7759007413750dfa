"""BlockMap <-> bytes: the block map encodings of the recording format (docs/FORMAT.md).

kvviz writes `rle-zlib-2` and reads it and the older `rle-zlib-1`.

Both cut a map into runs of adjacent blocks whose five planes (owner, filled, allocated,
refcount, cached) are all equal and store each run-level array shifted by its minimum, in the
smallest unsigned dtype that holds it, zlib-compressed:

    plane[i] = np.repeat(values, lengths)

Live KV maps are mostly long runs (a sequence's full blocks, a contiguous reservation, free
space), so this is small and costs time per run, not per block. Version 2 stores every array
as kvviz.store.arraycodec does (byte-shuffled; large arrays one zlib stream per byte plane, stored,
nibble-packed or deflated as suits each) and adds a per-plane mode for maps where joint runs
degenerate (more than 1 run per DENSE_RUNS blocks, e.g. a paged pool whose sequences grew in
lockstep, so that every block starts a run): each plane is then run-length coded on its own
(filled / allocated / refcount / cached change rarely even when owners alternate) or, when a
plane has too many runs of its own, stored per block; a per-block owner plane is stored as
differences between neighbours when those repeat, which turns the lockstep pattern into a
constant.
"""
from __future__ import annotations

import json
import zlib
from typing import NamedTuple

import numpy as np

from kvviz.core.blockmap import BlockMap
from kvviz.store import arraycodec as ac

ENCODING = "rle-zlib-2"
ENCODINGS = ("rle-zlib-1", "rle-zlib-2")
PLANES = ("owner", "filled", "allocated", "refcount", "cached")
PLANE_DTYPES = {"owner": np.int32, "filled": np.int32, "allocated": np.int32,
                "refcount": np.int16, "cached": np.bool_}
FINALS = ("final_seq", "final_len", "final_held")
DENSE_RUNS = 4  # per-plane mode when the map has more than num_blocks / DENSE_RUNS runs


class EncodedMap(NamedTuple):
    num_blocks: int
    runs: int  # runs of blocks whose five planes are all equal
    layout: str  # JSON, see docs/FORMAT.md
    blobs: dict[str, bytes | None]  # lengths (None in per-plane mode), the planes, finals
    nbytes: int  # total compressed bytes


def _as_int(a: np.ndarray) -> np.ndarray:
    return a.view(np.uint8) if a.dtype == np.bool_ else a


def _run_starts(change: np.ndarray) -> np.ndarray:
    starts = np.flatnonzero(change)
    starts += 1
    return np.concatenate((np.zeros(1, starts.dtype), starts))


def _plane_alone(arr: np.ndarray, n: int, name: str) -> tuple[bytes, dict]:
    """One plane in per-plane mode: its own runs, or per block (owner possibly as deltas)."""
    change = arr[1:] != arr[:-1]
    if (np.count_nonzero(change) + 1) * DENSE_RUNS <= n:
        starts = _run_starts(change)
        ql, ls = ac.narrow(np.diff(np.append(starts, n)))
        qv, vs = ac.narrow(arr[starts])
        return ac.compress((ql, ls), (qv, vs)), {
            "runs": int(starts.size), "lengths": ls, **vs}
    qv, vs = ac.narrow(arr)
    if name == "owner" and qv.itemsize > 1 and int(arr.max()) - int(arr.min()) < 2**30:
        d = np.diff(arr, prepend=arr[:1])  # |d| < 2**30: no int32 overflow
        # deltas pay off when they repeat (owners cycling in a fixed order, as when
        # sequences grow in lockstep); for owners in random order they only widen the values
        if np.count_nonzero(d[1:] != d[:-1]) * 2 < n:
            qd, ds = ac.narrow(d)
            if qd.itemsize <= qv.itemsize:
                return ac.compress((qd, ds)), {"runs": None, **ds, "delta_first": int(arr[0])}
    return ac.compress((qv, vs)), {"runs": None, **vs}


def encode(bm: BlockMap) -> EncodedMap:
    """`rle-zlib-2` (docs/FORMAT.md)."""
    n = bm.num_blocks
    planes = [_as_int(getattr(bm, p)) for p in PLANES]
    if n:
        change = planes[0][1:] != planes[0][:-1]
        for arr in planes[1:]:
            change |= arr[1:] != arr[:-1]
        runs = int(np.count_nonzero(change)) + 1  # counting first: cheap on a dense mask
    else:
        runs = 0
    arrays: dict[str, dict] = {}
    blobs: dict[str, bytes | None] = {}
    if runs * DENSE_RUNS <= n or n < 2:
        mode = "joint"
        starts = _run_starts(change) if n else np.zeros(0, np.int64)
        blobs["lengths"], arrays["lengths"] = ac.pack(np.diff(np.append(starts, n)))
        for name, arr in zip(PLANES, planes):
            blobs[name], arrays[name] = ac.pack(arr[starts])
    else:
        mode = "planes"
        blobs["lengths"] = None
        for name, arr in zip(PLANES, planes):
            blobs[name], arrays[name] = _plane_alone(arr, n, name)
    for name in FINALS:
        arr = getattr(bm, name)
        if arr is None:
            blobs[name] = None
        else:
            blobs[name], arrays[name] = ac.pack(np.asarray(arr))
    nbytes = sum(len(b) for b in blobs.values() if b is not None)
    return EncodedMap(n, runs, json.dumps({"mode": mode, "arrays": arrays}), blobs, nbytes)


def _decode_v2(num_blocks: int, runs: int, layout: dict, blobs: dict) -> dict[str, np.ndarray]:
    arrays = layout["arrays"]
    out = {}
    if layout["mode"] == "joint":
        raw = ac.inflate(blobs["lengths"])
        ac.check_size("lengths", raw, arrays["lengths"], runs)
        lengths = ac.values(raw, arrays["lengths"], runs)
        if int(lengths.sum()) != num_blocks or (lengths < 0).any():
            raise ValueError(f"run lengths add up to {int(lengths.sum())} blocks, expected "
                             f"{num_blocks}")
        for name in PLANES:
            raw = ac.inflate(blobs[name])
            ac.check_size(name, raw, arrays[name], runs)
            out[name] = np.repeat(ac.values(raw, arrays[name], runs), lengths)
        return out
    if layout["mode"] != "planes":
        raise ValueError(f"unknown layout mode {layout['mode']!r}")
    for name in PLANES:
        spec = arrays[name]
        raw = ac.inflate(blobs[name])
        r = spec["runs"]
        if r is None:
            ac.check_size(name, raw, spec, num_blocks)
            v = ac.values(raw, spec, num_blocks)
            if "delta_first" in spec:
                v[0] = int(spec["delta_first"])
                v = np.cumsum(v)
            out[name] = v
            continue
        cut = ac.stored_size(spec["lengths"], r)
        ac.check_size(name, memoryview(raw)[cut:], spec, r)
        lengths = ac.values(memoryview(raw)[:cut], spec["lengths"], r)
        if int(lengths.sum()) != num_blocks or (lengths < 0).any():
            raise ValueError(f"{name}: run lengths add up to {int(lengths.sum())} blocks, "
                             f"expected {num_blocks}")
        out[name] = np.repeat(ac.values(memoryview(raw)[cut:], spec, r), lengths)
    return out


def _unpack_v1(blob: bytes, spec: dict) -> np.ndarray:
    raw = np.frombuffer(zlib.decompress(blob), dtype=np.dtype(spec["dtype"]))
    off = int(spec["offset"])
    return raw.astype(np.int64) + off if off else raw


def _decode_v1(num_blocks: int, runs: int, spec: dict, blobs: dict) -> dict[str, np.ndarray]:
    lengths = _unpack_v1(blobs["lengths"], spec["lengths"]).astype(np.int64)
    if lengths.size != runs or int(lengths.sum()) != num_blocks:
        raise ValueError(f"run lengths add up to {int(lengths.sum())} blocks in {lengths.size} "
                         f"runs, expected {num_blocks} blocks in {runs} runs")
    out = {}
    for name in PLANES:
        vals = _unpack_v1(blobs[name], spec[name])
        if vals.size != runs:
            raise ValueError(f"{name}: {vals.size} run values, expected {runs}")
        out[name] = np.repeat(vals, lengths)
    return out


def decode(num_blocks: int, runs: int, layout: str, blobs: dict[str, bytes | None], *,
           block_size: int, bytes_per_token: int, label: str, contiguous: bool,
           buddy: bool = False, encoding: str = ENCODING) -> BlockMap:
    """Inverse of encode (or of version 1's). Raises ValueError when the pieces do not fit
    together."""
    spec = json.loads(layout)
    if encoding == "rle-zlib-1":
        planes = _decode_v1(num_blocks, runs, spec, blobs)
        arrays = spec
        finals = {n: None if blobs.get(n) is None else _unpack_v1(blobs[n], arrays[n])
                  for n in FINALS}
    elif encoding == "rle-zlib-2":
        planes = _decode_v2(num_blocks, runs, spec, blobs)
        arrays = spec["arrays"]
        finals = {}
        for name in FINALS:
            blob = blobs.get(name)
            if blob is None:
                finals[name] = None
                continue
            raw = ac.inflate(blob)
            count = arrays[name].get("count",
                                     len(raw) // np.dtype(arrays[name]["dtype"]).itemsize)
            finals[name] = ac.values(raw, arrays[name], count)
    else:
        raise ValueError(f"unknown block map encoding {encoding!r}")
    for name in PLANES:
        planes[name] = planes[name].astype(PLANE_DTYPES[name])
    for name in FINALS:
        if finals[name] is not None:
            finals[name] = finals[name].astype(np.int64 if name == "final_held" else np.int32)
    return BlockMap(**planes, block_size=block_size, bytes_per_token=bytes_per_token,
                    label=label, contiguous=contiguous, buddy=buddy, **finals)
