"""Decoding a recording, written from docs/FORMAT.md alone (no code shared with the writer).

Every function raises Undecodable (a ValueError) naming what does not fit the documented
format; the caller turns that into a mismatch.
"""
from __future__ import annotations

import json
import zlib
from typing import NamedTuple

import numpy as np

PLANES = ("owner", "filled", "allocated", "refcount", "cached")
FINALS = ("final_seq", "final_len", "final_held")
TABLES = ("table_len", "table_blocks")  # paged block tables (table block_tables, optional)
BLOB_COLUMNS = ("lengths", *PLANES, *FINALS, *TABLES)
UNSIGNED = ("uint8", "uint16", "uint32", "uint64")
CHUNK_FIELDS = ("event_id", "t", "step", "seq_id", "need_tokens", "free_tokens")
STORED_PER, STORED_PLUS = 64, 4096  # stored_cap: 1/64 more than the inflated bound, + 4 KiB
MAX_STREAMS = 16  # zlib streams in one blob: two arrays (runs mode) of 8 byte planes each


class Undecodable(ValueError):
    """A value that does not follow docs/FORMAT.md."""


class Map(NamedTuple):
    """One decoded block map (int64 planes, cached as bool)."""
    num_blocks: int
    block_size: int
    contiguous: bool
    buddy: bool
    planes: dict  # name -> np.ndarray, one value per block
    finals: dict  # name -> np.ndarray or None
    tables: dict  # TABLES name -> np.ndarray (empty: the map has no block_tables row)


def stored_cap(cap: int) -> int:
    """The most bytes a blob inflating to at most `cap` is stored in (docs/FORMAT.md, "Bounds":
    deflate adds a few bytes per 16 KiB block and per stream, far under this)."""
    return cap + cap // STORED_PER + STORED_PLUS


def check_stored(sizes: dict, cap: int) -> None:
    """Undecodable when a blob (name -> its stored length, None for NULL) takes more bytes than
    one inflating to at most `cap` may: refused from its length alone, before it is read."""
    for name, size in sizes.items():
        if isinstance(size, int) and size > stored_cap(cap):
            raise Undecodable(f"{name} is stored in {size} bytes, more than the "
                              f"{stored_cap(cap)} a blob inflating to at most {cap} takes")


def zlib_streams(blob: bytes, cap: int) -> bytes:
    """The documented blob: one to MAX_STREAMS complete zlib streams back to back, joined.
    Inflating stops past `cap` bytes (a bomb costs at most that much memory)."""
    if not isinstance(blob, bytes):
        raise Undecodable(f"expected a BLOB, got {type(blob).__name__}")
    if len(blob) > stored_cap(cap):
        raise Undecodable(f"stored in {len(blob)} bytes, more than the {stored_cap(cap)} a "
                          f"blob inflating to at most {cap} takes")
    out, rest, total = [], blob, 0
    while True:
        if len(out) == MAX_STREAMS:
            raise Undecodable(f"more than {MAX_STREAMS} zlib streams in one blob")
        d = zlib.decompressobj()
        try:
            part = d.decompress(rest, cap - total + 1)
        except zlib.error as exc:
            raise Undecodable(f"not zlib data ({exc})") from None
        total += len(part)
        if total > cap:
            raise Undecodable(f"inflates past {cap} bytes, more than its counts allow")
        out.append(part)
        if not d.eof:
            raise Undecodable("a zlib stream is cut short")
        rest = d.unused_data
        if not rest:
            return b"".join(out)


def blob_cap(num_blocks: int, runs: int) -> int:
    """The most bytes a map's blob may inflate to (docs/FORMAT.md, "Bounds")."""
    return 16 * (num_blocks + runs) + 65536


def spec_size(spec: dict, count: int) -> int:
    """Bytes that `count` stored values take after inflating (nibble planes take half)."""
    width = np.dtype(spec_dtype(spec)).itemsize
    nib = spec.get("nibbles") or []
    return (width - len(nib)) * count + len(nib) * ((count + 1) // 2)


def spec_dtype(spec: dict) -> str:
    if not isinstance(spec, dict) or spec.get("dtype") not in UNSIGNED:
        raise Undecodable(f"array spec {spec!r} has no unsigned dtype")
    off = spec.get("offset")
    if not isinstance(off, int) or isinstance(off, bool) or not -2**63 <= off < 2**63:
        raise Undecodable(f"array spec {str(spec)[:80]} has no int64 offset")
    return spec["dtype"]


def unshuffle(raw: bytes, spec: dict, count: int) -> np.ndarray:
    """`count` values stored byte-shuffled (lowest byte plane first), offset added (int64)."""
    width = np.dtype(spec_dtype(spec)).itemsize
    if len(raw) != spec_size(spec, count):
        raise Undecodable(f"{len(raw)} bytes where {count} values of spec {spec} take "
                          f"{spec_size(spec, count)}")
    nib = set(spec.get("nibbles") or [])
    if not nib <= set(range(width)):
        raise Undecodable(f"nibble planes {sorted(nib)} outside a {width}-byte dtype")
    total = np.zeros(count, np.uint64)
    pos = 0
    for k in range(width):
        if k in nib:
            packed = np.frombuffer(raw, np.uint8, (count + 1) // 2, pos)
            pos += packed.size
            plane = np.empty(2 * packed.size, np.uint8)
            plane[0::2], plane[1::2] = packed & 15, packed >> 4
            plane = plane[:count]
        else:
            plane = np.frombuffer(raw, np.uint8, count, pos)
            pos += count
        total |= plane.astype(np.uint64) << np.uint64(8 * k)
    if width == 8 and count and int(total.max()) >= 2**63:
        raise Undecodable("a uint64 value beyond int64")
    return total.astype(np.int64) + spec["offset"]


def _v2_plane(name: str, blob: bytes, spec: dict, mode: str, n: int, runs: int,
              lengths: np.ndarray | None) -> np.ndarray:
    raw = zlib_streams(blob, blob_cap(n, runs))
    if mode == "joint":
        return np.repeat(unshuffle(raw, spec, runs), lengths)
    r = spec.get("runs", "missing")
    if r is None:
        v = unshuffle(raw, spec, n)
        if "delta_first" in spec:
            first = spec["delta_first"]
            if not isinstance(first, int) or isinstance(first, bool) or not (
                    -2**63 <= first < 2**63):
                raise Undecodable(f"{name}: delta_first {str(first)[:40]} is not an int64")
            if n:
                v[0] = first
            v = np.cumsum(v)
        return v
    if not isinstance(r, int) or r < 0:
        raise Undecodable(f"{name}: spec 'runs' is {r!r}")
    cut = spec_size(spec.get("lengths"), r)
    lens = unshuffle(raw[:cut], spec["lengths"], r)
    if (lens < 0).any() or int(lens.sum()) != n:
        raise Undecodable(f"{name}: its run lengths cover {int(lens.sum())} blocks, not {n}")
    return np.repeat(unshuffle(raw[cut:], spec, r), lens)


def _v1_array(blob: bytes, spec: dict, cap: int) -> np.ndarray:
    if not isinstance(blob, bytes):
        raise Undecodable(f"expected a BLOB, got {type(blob).__name__}")
    check_stored({"blob": len(blob)}, cap)
    d = zlib.decompressobj()
    try:
        raw = d.decompress(blob, cap + 1)
    except zlib.error as exc:
        raise Undecodable(f"not a zlib stream ({exc})") from None
    if len(raw) > cap:
        raise Undecodable(f"inflates past {cap} bytes, more than its counts allow")
    dt = np.dtype(spec_dtype(spec)).newbyteorder("<")
    if len(raw) % dt.itemsize:
        raise Undecodable(f"{len(raw)} bytes are not whole {dt.name} values")
    return np.frombuffer(raw, dt).astype(np.int64) + spec["offset"]


def _finals_v2(row: dict, arrays: dict, names: tuple, cap: int) -> dict:
    out = {}
    for name in names:
        blob = row.get(name)
        if blob is None:
            out[name] = None
            continue
        spec = arrays.get(name)
        raw = zlib_streams(blob, cap)
        count = spec.get("count") if isinstance(spec, dict) else None
        if count is None:
            width = np.dtype(spec_dtype(spec)).itemsize
            if len(raw) % width:
                raise Undecodable(f"{name}: {len(raw)} bytes are not whole values")
            count = len(raw) // width
        out[name] = unshuffle(raw, spec, count)
    return out


def block_map(row: dict) -> Map:
    """A blockmaps row (column name -> value) decoded into its planes and finals."""
    n, runs, enc = row["num_blocks"], row["runs"], row["encoding"]
    if not isinstance(n, int) or n < 0 or not isinstance(runs, int) or runs < 0:
        raise Undecodable(f"num_blocks {n!r} / runs {runs!r} are not counts")
    try:
        layout = json.loads(row["layout"])
    except (TypeError, ValueError, RecursionError) as exc:
        raise Undecodable(f"layout is not JSON ({type(exc).__name__})") from None
    try:
        planes, finals, tables = _planes(row, layout, n, runs, enc)
    except Undecodable:
        raise
    except (KeyError, TypeError, AttributeError, IndexError, ValueError,
            OverflowError) as exc:
        raise Undecodable(f"{enc} map does not fit its layout ({type(exc).__name__}: "
                          f"{str(exc)[:200]})") from None
    for name, arr in planes.items():
        if arr.size != n:
            raise Undecodable(f"plane {name} has {arr.size} values for {n} blocks")
    planes["cached"] = planes["cached"].astype(bool)
    return Map(n, int(row["block_size"]), bool(row["contiguous"]), bool(row.get("buddy") or 0),
               planes, finals, tables)


def _planes(row: dict, layout: object, n: int, runs: int, enc: str) -> tuple:
    cap = blob_cap(n, runs)
    if enc == "rle-zlib-1":
        lengths = _v1_array(row["lengths"], layout["lengths"], cap)
        if lengths.size != runs or int(lengths.sum()) != n:
            raise Undecodable(f"{lengths.size} run lengths covering {int(lengths.sum())} "
                              f"blocks, expected {runs} runs covering {n}")
        planes = {}
        for p in PLANES:
            vals = _v1_array(row[p], layout[p], cap)
            if vals.size != runs:
                raise Undecodable(f"{p}: {vals.size} run values for {runs} runs")
            planes[p] = np.repeat(vals, lengths)
        finals = {f: None if row.get(f) is None else _v1_array(row[f], layout[f], cap)
                  for f in FINALS}
        return planes, finals, {}
    if enc != "rle-zlib-2":
        raise Undecodable(f"unknown encoding {enc!r}")
    mode, arrays = layout["mode"], layout["arrays"]
    if mode not in ("joint", "planes"):
        raise Undecodable(f"unknown layout mode {mode!r}")
    lengths = None
    if mode == "joint":
        lengths = unshuffle(zlib_streams(row["lengths"], cap), arrays["lengths"], runs)
        if (lengths < 0).any() or int(lengths.sum()) != n:
            raise Undecodable(f"run lengths cover {int(lengths.sum())} blocks, not {n}")
    planes = {p: _v2_plane(p, row[p], arrays[p], mode, n, runs, lengths) for p in PLANES}
    return planes, _finals_v2(row, arrays, FINALS, cap), {}


def event_chunk(n: int, encoding: str, data: bytes) -> dict[str, np.ndarray]:
    """The six columns of a `cols-zlib-1` chunk of n events."""
    if encoding != "cols-zlib-1":
        raise Undecodable(f"unknown event chunk encoding {encoding!r}")
    if not isinstance(data, bytes):
        raise Undecodable(f"event chunk data is {type(data).__name__}, not a BLOB")
    check_stored({"event chunk data": len(data)}, 48 * n)
    d = zlib.decompressobj()
    try:
        raw = d.decompress(data, 48 * n + 1)  # at most one byte past what n events take
    except zlib.error as exc:
        raise Undecodable(f"event chunk is not zlib data ({exc})") from None
    if len(raw) != 48 * n:
        raise Undecodable(f"event chunk of {n} events holds {len(raw)} bytes, not {48 * n}")
    return {f: np.frombuffer(raw, "<f8" if f == "t" else "<i8", n, 8 * n * k)
            for k, f in enumerate(CHUNK_FIELDS)}


def block_tables(row: dict, cap: int = 1 << 30) -> dict[str, np.ndarray]:
    """A block_tables row (`tables-zlib-1`): table_len and table_blocks, each inflating to at
    most `cap` bytes."""
    if row["encoding"] != "tables-zlib-1":
        raise Undecodable(f"unknown block table encoding {str(row['encoding'])[:40]!r}")
    try:
        layout = json.loads(row["layout"])
        if not isinstance(layout, dict):
            raise Undecodable("block table layout is not a JSON object")
        return _finals_v2(row, layout, TABLES, cap)
    except Undecodable:
        raise
    except (TypeError, ValueError, KeyError, AttributeError, OverflowError,
            RecursionError) as exc:
        raise Undecodable(f"block tables do not fit their layout ({type(exc).__name__}: "
                          f"{str(exc)[:200]})") from None
