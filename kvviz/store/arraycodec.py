"""Integer arrays <-> bytes, as the recording format stores every array (docs/FORMAT.md).

An array is narrowed (shifted by its minimum, in the smallest unsigned dtype that holds it),
byte-shuffled (all lowest bytes first, as HDF5's shuffle filter does, so that deflate's run
matching sees the mostly-constant high bytes together) and deflated with zlib. A large array
becomes one zlib stream per byte plane, each deflated (Z_RLE, or Huffman coding alone where
runs are absent) or stored when a sample shows deflate would barely shrink it; a run-free
plane whose values are all below 16 is stored two values per byte ("nibbles", format 4).
All of it is plain zlib, so numpy and the standard library read it. kvviz.store.mapcodec decides
which arrays a block map becomes.
"""
from __future__ import annotations

import zlib

import numpy as np

LEVEL = 1  # zlib level: speed over the last few percent of size
# Z_RLE: deflate with matches of distance 1 only. The arrays are run values (an owner id per
# run, mostly distinct), where searching for longer matches costs time and finds little
# (docs/BENCHMARKS.md, decision log).
# Any zlib decoder reads it.
STRATEGY = zlib.Z_RLE
ADAPTIVE_MIN = 1 << 18  # arrays with more values: one zlib stream per byte plane, see _choice
SAMPLES, SAMPLE_BYTES, STORE_ABOVE = 4, 4096, 0.9


def _deflate(data: bytes | memoryview, level: int = LEVEL, strategy: int = STRATEGY) -> bytes:
    z = zlib.compressobj(level, zlib.DEFLATED, 15, 8, strategy)
    return z.compress(data) + z.flush()


def _choice(plane: memoryview) -> tuple[int, int]:
    """(level, strategy) for one large byte plane, from four 4 KB samples of it: stored
    (level 0) when deflate would save < 10% (random-looking bytes: the low bytes of owner ids
    in a busy pool where every block has another owner); Huffman coding alone when matching
    runs gains nothing (faster than Z_RLE on such bytes, same size); else Z_RLE."""
    step = len(plane) // SAMPLES
    sample = b"".join(plane[i * step: i * step + SAMPLE_BYTES] for i in range(SAMPLES))
    rle = len(_deflate(sample))
    if rle >= STORE_ABOVE * len(sample):
        return 0, STRATEGY
    if len(_deflate(sample, strategy=zlib.Z_HUFFMAN_ONLY)) <= 1.02 * rle:
        return LEVEL, zlib.Z_HUFFMAN_ONLY
    return LEVEL, STRATEGY


def compress(*arrays: tuple[np.ndarray, dict]) -> bytes:
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


def stored_size(spec: dict, count: int) -> int:
    """Bytes that `count` values of a stored array take once inflated."""
    packed = len(spec.get("nibbles", ()))
    return (np.dtype(spec["dtype"]).itemsize - packed) * count + packed * ((count + 1) // 2)


def inflate(blob: bytes) -> bytes:
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


def narrow(a: np.ndarray) -> tuple[np.ndarray, dict]:
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


def values(raw: bytes | memoryview, spec: dict, count: int) -> np.ndarray:
    x = _unshuffled(raw, spec, count).astype(np.int64)
    off = int(spec["offset"])
    return x + off if off else x


def check_size(name: str, raw: bytes | memoryview, spec: dict, count: int) -> None:
    want = stored_size(spec, count)
    if len(raw) != want:
        packed = f", byte planes {spec['nibbles']} as nibbles" if spec.get("nibbles") else ""
        raise ValueError(f"{name}: {len(raw)} bytes of values, expected {want} "
                         f"({count} x {spec['dtype']}{packed})")


def pack(a: np.ndarray) -> tuple[bytes, dict]:
    q, spec = narrow(a)
    return compress((q, spec)), spec
