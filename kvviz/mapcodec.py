"""BlockMap <-> bytes: the block map encodings of the recording format (docs/FORMAT.md).

kvviz writes `rle-zlib-2` and reads it and the older `rle-zlib-1`.

Both cut a map into runs of adjacent blocks whose five planes (owner, filled, allocated,
refcount, cached) are all equal and store each run-level array shifted by its minimum, in the
smallest unsigned dtype that holds it, zlib-compressed:

    plane[i] = np.repeat(values, lengths)

Live KV maps are mostly long runs (a sequence's full blocks, a contiguous reservation, free
space), so this is small and costs time per run, not per block. Version 2 adds three things:

- byte shuffling: a multi-byte array is stored as all its lowest bytes, then all second
  bytes, ... (as HDF5's shuffle filter does), which lets deflate's run-length matching see
  the mostly-constant high bytes: 15-18% smaller at the same speed on 10^5-run maps;
- a per-plane mode for maps where joint runs degenerate (more than 1 run per DENSE_RUNS
  blocks, e.g. a paged pool whose sequences grew in lockstep, so that every block starts a
  run): each plane is then run-length coded on its own (filled / allocated / refcount /
  cached change rarely even when owners alternate) or, when a plane has too many runs of its
  own, stored per block; a per-block owner plane is stored as differences between
  neighbours when those repeat, which turns the lockstep pattern into a constant;
- large arrays as one zlib stream per byte plane, each deflated (Z_RLE, or Huffman coding
  alone where runs are absent) or stored when a sample shows deflate would barely shrink it;
  from format 4 on, such a run-free plane whose values are all below 16 is stored two values
  per byte ("nibbles"): the high byte of 12-bit owner ids in a busy pool, where Huffman
  coding took 9.5 ms per 10^6 blocks and packing takes ~1 ms for the same size.
All of it is plain zlib, so numpy and the standard library read it (docs/FORMAT.md).
"""
from __future__ import annotations

import json
import zlib
from typing import NamedTuple

import numpy as np

from kvviz.blockmap import BlockMap

ENCODING = "rle-zlib-2"
ENCODINGS = ("rle-zlib-1", "rle-zlib-2")
PLANES = ("owner", "filled", "allocated", "refcount", "cached")
PLANE_DTYPES = {"owner": np.int32, "filled": np.int32, "allocated": np.int32,
                "refcount": np.int16, "cached": np.bool_}
FINALS = ("final_seq", "final_len", "final_held")
DENSE_RUNS = 4  # per-plane mode when the map has more than num_blocks / DENSE_RUNS runs
LEVEL = 1  # zlib level: speed over the last few percent of size
# Z_RLE: deflate with matches of distance 1 only. The arrays are run values (an owner id per
# run, mostly distinct), where searching for longer matches costs time and finds little:
# 30-60% faster than the default strategy on 10^5-run maps, 4-7% larger (docs/BENCHMARKS.md).
# Any zlib decoder reads it.
STRATEGY = zlib.Z_RLE
ADAPTIVE_MIN = 1 << 18  # arrays with more values: one zlib stream per byte plane, see _choice
SAMPLES, SAMPLE_BYTES, STORE_ABOVE = 4, 4096, 0.9


class EncodedMap(NamedTuple):
    num_blocks: int
    runs: int  # runs of blocks whose five planes are all equal
    layout: str  # JSON, see docs/FORMAT.md
    blobs: dict[str, bytes | None]  # lengths (None in per-plane mode), the planes, finals
    nbytes: int  # total compressed bytes


def _deflate(data: bytes | memoryview, level: int = LEVEL, strategy: int = STRATEGY) -> bytes:
    z = zlib.compressobj(level, zlib.DEFLATED, 15, 8, strategy)
    return z.compress(data) + z.flush()


def _choice(plane: memoryview) -> tuple[int, int]:
    """(level, strategy) for one large byte plane, from four 4 KB samples of it: stored
    (level 0) when deflate would save < 10% (random-looking bytes: the low bytes of owner ids
    in a busy pool where every block has another owner); Huffman coding alone when matching
    runs gains nothing (~3x faster than Z_RLE on such bytes, same size); else Z_RLE."""
    step = len(plane) // SAMPLES
    sample = b"".join(plane[i * step: i * step + SAMPLE_BYTES] for i in range(SAMPLES))
    rle = len(_deflate(sample))
    if rle >= STORE_ABOVE * len(sample):
        return 0, STRATEGY
    if len(_deflate(sample, strategy=zlib.Z_HUFFMAN_ONLY)) <= 1.02 * rle:
        return LEVEL, zlib.Z_HUFFMAN_ONLY
    return LEVEL, STRATEGY


def _compress(*arrays: tuple[np.ndarray, dict]) -> bytes:
    """The arrays' shuffled bytes, back to back, as one or more zlib streams: one for a
    small array, one per byte plane (each deflated or stored, see _choice) for a large one.
    A large array's run-free byte planes with values < 16 are nibble-packed (_nibbles); their
    indices go to the array's spec as "nibbles"."""
    out = []
    for q, spec in arrays:
        raw = memoryview(_shuffled(q))
        if q.size < ADAPTIVE_MIN:
            out.append(_deflate(raw))
            continue
        for k in range(q.itemsize):
            plane = raw[k * q.size:(k + 1) * q.size]
            how = _choice(plane)
            if how[1] == zlib.Z_HUFFMAN_ONLY and int(np.frombuffer(plane, np.uint8).max()) < 16:
                plane = memoryview(_nibbles(plane))
                spec.setdefault("nibbles", []).append(k)
                spec["count"] = q.size  # the inflated size alone no longer tells it
                how = _choice(plane)
            out.append(_deflate(plane, *how))
    return b"".join(out)


def _nibbles(plane: memoryview) -> bytes:
    """Bytes < 16 two per byte: value 2i in the low half of byte i, value 2i+1 in the high."""
    b = np.frombuffer(plane, np.uint8)
    if b.size % 2:
        b = np.append(b, np.uint8(0))
    w = b.view("<u2")  # w = b[2i] | b[2i+1] << 8
    return ((w & 0x0F) | ((w >> 4) & 0xF0)).astype(np.uint8).tobytes()


def _unnibbles(packed: np.ndarray, count: int) -> np.ndarray:
    out = np.empty(2 * packed.size, np.uint8)
    out[0::2] = packed & 0x0F
    out[1::2] = packed >> 4
    return out[:count]


def _stored_size(spec: dict, count: int) -> int:
    """Bytes that `count` values of a stored array take once inflated."""
    packed = len(spec.get("nibbles", ()))
    return (np.dtype(spec["dtype"]).itemsize - packed) * count + packed * ((count + 1) // 2)


def _inflate(blob: bytes) -> bytes:
    """All zlib streams of a blob, decompressed and joined."""
    out = []
    rest = blob
    while True:
        d = zlib.decompressobj()
        out.append(d.decompress(rest))
        if not d.eof:
            raise ValueError("a zlib stream is truncated")
        rest = d.unused_data
        if not rest:
            return b"".join(out)


def _narrow(a: np.ndarray) -> tuple[np.ndarray, dict]:
    """a - min(a) in the smallest unsigned dtype that holds it, and its spec."""
    if a.size == 0:
        return np.zeros(0, np.uint8), {"dtype": "uint8", "offset": 0}
    lo, hi = int(a.min()), int(a.max())
    span = hi - lo
    dt = (np.uint8 if span < 2**8 else np.uint16 if span < 2**16 else np.uint32
          if span < 2**32 else np.uint64)
    if lo == 0:
        q = a.astype(dt)
    elif span < 2**31 and a.dtype.itemsize >= 4:
        q = (a - a.dtype.type(lo)).astype(dt)  # no overflow: the span fits the dtype
    else:
        q = (a.astype(np.int64) - lo).astype(dt)
    return q, {"dtype": np.dtype(dt).name, "offset": lo}


def _shuffled(q: np.ndarray) -> bytes:
    """Bytes grouped by significance (all lowest bytes first); little-endian."""
    if q.itemsize == 1:
        return q.tobytes()
    return np.ascontiguousarray(q.astype(q.dtype.newbyteorder("<"), copy=False)
                                .view(np.uint8).reshape(-1, q.itemsize).T).tobytes()


def _unshuffled(raw: bytes | memoryview, spec: dict, count: int) -> np.ndarray:
    dt = np.dtype(spec["dtype"]).newbyteorder("<")
    packed = spec.get("nibbles", ())
    if packed:  # byte planes one by one, unpacking the nibble-packed ones
        b = np.empty((dt.itemsize, count), np.uint8)
        pos = 0
        for k in range(dt.itemsize):
            size = (count + 1) // 2 if k in packed else count
            plane = np.frombuffer(raw, np.uint8, size, pos)
            b[k] = _unnibbles(plane, count) if k in packed else plane
            pos += size
    else:
        b = np.frombuffer(raw, np.uint8, count * dt.itemsize).reshape(dt.itemsize, count)
    if dt.itemsize == 1:
        return b.reshape(count).view(dt)
    return np.ascontiguousarray(b.T).view(dt).ravel()


def _as_int(a: np.ndarray) -> np.ndarray:
    return a.view(np.uint8) if a.dtype == np.bool_ else a


def _run_starts(change: np.ndarray) -> np.ndarray:
    starts = np.flatnonzero(change)
    starts += 1
    return np.concatenate((np.zeros(1, starts.dtype), starts))


def _pack(a: np.ndarray) -> tuple[bytes, dict]:
    q, spec = _narrow(a)
    return _compress((q, spec)), spec


def _plane_alone(arr: np.ndarray, n: int, name: str) -> tuple[bytes, dict]:
    """One plane in per-plane mode: its own runs, or per block (owner possibly as deltas)."""
    change = arr[1:] != arr[:-1]
    if (np.count_nonzero(change) + 1) * DENSE_RUNS <= n:
        starts = _run_starts(change)
        ql, ls = _narrow(np.diff(np.append(starts, n)))
        qv, vs = _narrow(arr[starts])
        return _compress((ql, ls), (qv, vs)), {
            "runs": int(starts.size), "lengths": ls, **vs}
    qv, vs = _narrow(arr)
    if name == "owner" and qv.itemsize > 1 and int(arr.max()) - int(arr.min()) < 2**30:
        d = np.diff(arr, prepend=arr[:1])  # |d| < 2**30: no int32 overflow
        # deltas pay off when they repeat (owners cycling in a fixed order, as when
        # sequences grow in lockstep); for owners in random order they only widen the values
        if np.count_nonzero(d[1:] != d[:-1]) * 2 < n:
            qd, ds = _narrow(d)
            if qd.itemsize <= qv.itemsize:
                return _compress((qd, ds)), {"runs": None, **ds, "delta_first": int(arr[0])}
    return _compress((qv, vs)), {"runs": None, **vs}


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
        blobs["lengths"], arrays["lengths"] = _pack(np.diff(np.append(starts, n)))
        for name, arr in zip(PLANES, planes):
            blobs[name], arrays[name] = _pack(arr[starts])
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
            blobs[name], arrays[name] = _pack(np.asarray(arr))
    nbytes = sum(len(b) for b in blobs.values() if b is not None)
    return EncodedMap(n, runs, json.dumps({"mode": mode, "arrays": arrays}), blobs, nbytes)


def _values(raw: bytes | memoryview, spec: dict, count: int) -> np.ndarray:
    x = _unshuffled(raw, spec, count).astype(np.int64)
    off = int(spec["offset"])
    return x + off if off else x


def _decode_v2(num_blocks: int, runs: int, layout: dict, blobs: dict) -> dict[str, np.ndarray]:
    arrays = layout["arrays"]
    out = {}
    if layout["mode"] == "joint":
        raw = _inflate(blobs["lengths"])
        _check_size("lengths", raw, arrays["lengths"], runs)
        lengths = _values(raw, arrays["lengths"], runs)
        if int(lengths.sum()) != num_blocks or (lengths < 0).any():
            raise ValueError(f"run lengths add up to {int(lengths.sum())} blocks, expected "
                             f"{num_blocks}")
        for name in PLANES:
            raw = _inflate(blobs[name])
            _check_size(name, raw, arrays[name], runs)
            out[name] = np.repeat(_values(raw, arrays[name], runs), lengths)
        return out
    if layout["mode"] != "planes":
        raise ValueError(f"unknown layout mode {layout['mode']!r}")
    for name in PLANES:
        spec = arrays[name]
        raw = _inflate(blobs[name])
        r = spec["runs"]
        if r is None:
            _check_size(name, raw, spec, num_blocks)
            v = _values(raw, spec, num_blocks)
            if "delta_first" in spec:
                v[0] = int(spec["delta_first"])
                v = np.cumsum(v)
            out[name] = v
            continue
        cut = _stored_size(spec["lengths"], r)
        _check_size(name, memoryview(raw)[cut:], spec, r)
        lengths = _values(memoryview(raw)[:cut], spec["lengths"], r)
        if int(lengths.sum()) != num_blocks or (lengths < 0).any():
            raise ValueError(f"{name}: run lengths add up to {int(lengths.sum())} blocks, "
                             f"expected {num_blocks}")
        out[name] = np.repeat(_values(memoryview(raw)[cut:], spec, r), lengths)
    return out


def _check_size(name: str, raw: bytes | memoryview, spec: dict, count: int) -> None:
    want = _stored_size(spec, count)
    if len(raw) != want:
        packed = f", byte planes {spec['nibbles']} as nibbles" if spec.get("nibbles") else ""
        raise ValueError(f"{name}: {len(raw)} bytes of values, expected {want} "
                         f"({count} x {spec['dtype']}{packed})")


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
            raw = _inflate(blob)
            count = arrays[name].get("count",
                                     len(raw) // np.dtype(arrays[name]["dtype"]).itemsize)
            finals[name] = _values(raw, arrays[name], count)
    else:
        raise ValueError(f"unknown block map encoding {encoding!r}")
    for name in PLANES:
        planes[name] = planes[name].astype(PLANE_DTYPES[name])
    for name in FINALS:
        if finals[name] is not None:
            finals[name] = finals[name].astype(np.int64 if name == "final_held" else np.int32)
    return BlockMap(**planes, block_size=block_size, bytes_per_token=bytes_per_token,
                    label=label, contiguous=contiguous, buddy=buddy, **finals)
