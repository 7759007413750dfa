"""Checks on what the reader takes from a recording: a hand-edited or damaged file gives one
StoreError naming the table, column and what is wrong, never a TypeError further on.

Each check costs one pass over values already read (vectorized for frames): SQLite stores any
value in any column, so a REAL column can hand back text or a blob.
"""
from __future__ import annotations

import json
import math
import re
import zlib
from collections.abc import Callable

import numpy as np
import pandas as pd

from kvviz.core.errors import StoreError
from kvviz.store.schema import STATUSES

MAX_META_DEPTH = 64  # kvviz writes 3 levels; a deeper run header is hand-made
INFLATE_CAP = 1 << 30  # no stored blob inflates past 1 GiB: a larger one is damage or a bomb
SQL_TYPES = {"INTEGER": {"integer"}, "REAL": {"real", "integer"}, "TEXT": {"text"},
             "BLOB": {"blob"}}
IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
MAX_OWNER = (1 << 31) - 2  # an owner is -1 (free) or a sequence id
# run.meta lane fields: (key, lowest, highest), checked when present
LANE_RANGES = (("block_size", 1, (1 << 31) - 1), ("num_blocks", 0, 1 << 24),
               ("capacity_tokens", 1, ((1 << 31) - 1) << 24))


def _kind(v: object) -> str:
    return {dict: "an object", list: "a list", str: "text", bytes: "a blob",
            type(None): "null"}.get(type(v), type(v).__name__)


def _depth(value: object) -> int:
    """Nesting depth of a JSON value, without recursion."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        v, d = todo.pop()
        if isinstance(v, (dict, list)):
            deepest = max(deepest, d)
            todo.extend((x, d + 1) for x in (v.values() if isinstance(v, dict) else v))
    return deepest


def meta(raw: object, where: str) -> dict:
    """run.meta as a dict whose 'lanes' (if any) is a list of objects with text names."""
    if not isinstance(raw, str):
        raise StoreError(f"{where}: run metadata is {_kind(raw)}, not JSON text")
    try:
        m = json.loads(raw)
    except RecursionError:
        raise StoreError(f"{where}: run metadata is nested too deeply") from None
    except ValueError as exc:
        raise StoreError(f"{where}: run metadata is not valid JSON ({exc})") from None
    if not isinstance(m, dict):
        raise StoreError(f"{where}: run metadata must be a JSON object, got {_kind(m)}")
    if _depth(m) > MAX_META_DEPTH:  # what loads may still be too deep to print or save
        raise StoreError(f"{where}: run metadata is nested too deeply (more than "
                         f"{MAX_META_DEPTH} levels)")
    lanes = m.get("lanes", [])
    if not isinstance(lanes, list):
        raise StoreError(f"{where}: run metadata 'lanes' must be a list, got {_kind(lanes)}")
    for i, lane in enumerate(lanes):
        if not isinstance(lane, dict):
            raise StoreError(f"{where}: run metadata lanes[{i}] must be an object, got "
                             f"{_kind(lane)}")
        if "name" in lane and not isinstance(lane["name"], str):
            raise StoreError(f"{where}: run metadata lanes[{i}].name must be text, got "
                             f"{_kind(lane['name'])}")
        for key, lo, hi in LANE_RANGES:  # the verifier's bounds (kvviz/verify/trust.py)
            if key in lane and not (isinstance(lane[key], int) and not isinstance(
                    lane[key], bool) and lo <= lane[key] <= hi):
                raise StoreError(f"{where}: run metadata lanes[{i}].{key} must be an integer "
                                 f"in {lo}..{hi}, got {lane[key]!r:.60}")
    return m


def owners(owner: np.ndarray, what: str) -> None:
    """StoreError when a map's owners leave -1 (free) and 0..MAX_OWNER (the verifier's
    range: a sequence id whose id + 1 still fits int32)."""
    if owner.size and (int(owner.min()) < -1 or int(owner.max()) > MAX_OWNER):
        bad = np.flatnonzero((owner < -1) | (owner > MAX_OWNER))
        raise StoreError(f"{what}: {bad.size} owners are outside -1 (free) and 0..{MAX_OWNER} "
                         f"(first: block {int(bad[0])}, owner {int(owner[bad[0]])})")


def number(v: object, what: str, *, integer: bool = False, lo: float | None = None,
           null: bool = False) -> float | int | None:
    """One stored number (finite, >= lo); StoreError naming `what` otherwise."""
    if v is None and null:
        return None
    ok = isinstance(v, int) and not isinstance(v, bool) or (
        isinstance(v, float) and not integer and math.isfinite(v))
    if not ok or (lo is not None and v < lo):  # type: ignore[operator]
        bound = "" if lo is None else f" >= {lo:g}"
        raise StoreError(f"{what} must be {'an integer' if integer else 'a finite number'}"
                         f"{bound}, got {v!r:.60}")
    return v  # type: ignore[return-value]


def run_row(row: tuple, where: str) -> tuple:
    """(meta, status, message, heartbeat, format_version, stride) of the run table, checked."""
    raw, status, message, beat, version, stride = row
    if status not in STATUSES:
        raise StoreError(f"{where}: run status must be one of {list(STATUSES)}, got "
                         f"{status!r:.60}")
    if message is not None and not isinstance(message, str):
        raise StoreError(f"{where}: run status_message must be text, got {_kind(message)}")
    return (meta(raw, where), status, message or "",
            number(beat, f"{where}: run heartbeat_unix", null=True),
            number(version, f"{where}: run format_version", integer=True, lo=1),
            number(stride, f"{where}: run blockmap_stride", integer=True, lo=1))


def frame(df: pd.DataFrame, table: str, where: str, *, need: tuple[str, ...] = (),
          text: tuple[str, ...] = (), numeric: tuple[str, ...] = (), suffix: str = "\0",
          finite: tuple[str, ...] = ("t",)) -> pd.DataFrame:
    """A frame read from `table`, checked: columns in `need` present; in `text`, text or
    null; in `numeric` (or named ...`suffix`) and `finite`, numbers or null (`finite`: finite
    numbers); any other column, numbers or text but not both, and no blobs."""
    missing = [c for c in need if c not in df.columns]
    if missing:
        raise StoreError(f"{where}: table {table} has no column {missing[0]!r}")
    for col in df.columns:
        s = df[col]
        is_text = col in text
        is_num = col in numeric or col in finite or str(col).endswith(suffix)
        if pd.api.types.is_string_dtype(s.dtype) and s.dtype != object:  # pandas' str
            bad = is_num and not s.isna().all()
        elif s.dtype != object:  # numbers or booleans
            bad = is_text and not s.isna().all()
        else:
            kinds = {type(v) for v in s.dropna()}
            bad = bool(kinds & {bytes, bytearray, memoryview}) if not is_text else bool(
                kinds - {str})
            if is_num:
                bad = bad or str in kinds
            elif not is_text:
                bad = bad or (str in kinds and len(kinds) > 1)
        if bad:
            want = "text" if is_text else "numbers" if is_num else "of one kind"
            raise StoreError(f"{where}: table {table} column {col!r} holds values that are "
                             f"not {want}")
    for col in finite:
        if col in df.columns and len(df) and not np.isfinite(
                pd.to_numeric(df[col], errors="coerce").to_numpy(np.float64)).all():
            raise StoreError(f"{where}: table {table} column {col!r} holds a value that is "
                             "not a finite number")
    return df


def inflate(blob: object, what: str, cap: int = INFLATE_CAP) -> bytes:
    """zlib data -> bytes, at most `cap` of them; StoreError when not a blob or damaged."""
    if not isinstance(blob, bytes):
        raise StoreError(f"{what} is {_kind(blob)}, not a blob")
    d = zlib.decompressobj()
    try:
        out = d.decompress(blob, cap)
    except zlib.error as exc:
        raise StoreError(f"{what} is damaged ({exc})") from None
    if d.unconsumed_tail:
        raise StoreError(f"{what} inflates past {cap} bytes")
    if not d.eof:
        raise StoreError(f"{what} is truncated")
    return out


def json_object(blob: object, what: str, cap: int = INFLATE_CAP) -> dict:
    """A zlib blob of a JSON object (inflated to at most `cap` bytes) -> dict; StoreError."""
    try:
        out = json.loads(inflate(blob, what, cap))
    except (ValueError, RecursionError) as exc:
        raise StoreError(f"{what} are not valid JSON ({exc})") from None
    if not isinstance(out, dict):
        raise StoreError(f"{what} must be a JSON object")
    return out


def bounded_streams(blob: object, what: str, cap: int, step: int = 1 << 20) -> None:
    """StoreError when the zlib streams of `blob` (one after another, as kvviz.store.arraycodec
    writes them) inflate past `cap` bytes: a bomb costs at most `step` bytes of memory here.
    Anything else wrong with the blob is left to its decoder to name."""
    if not isinstance(blob, bytes):
        return
    total, rest = 0, blob
    while rest:
        d, buf = zlib.decompressobj(), rest
        try:
            while buf:
                total += len(d.decompress(buf, step))
                if total > cap:
                    raise StoreError(f"{what} inflates past {cap} bytes")
                buf = d.unconsumed_tail
        except zlib.error:
            return
        if not d.eof:
            return
        rest = d.unused_data


def declared_types(q: Callable[[str], list[tuple]], table: str, where: str) -> None:
    """StoreError when a value of `table` has not its column's declared SQLite type (or is
    NULL where the column forbids it). Cost: one GROUP BY typeof() per typed column."""
    for _, col, decl, notnull, _, _ in q(f"PRAGMA table_info({table})"):
        allowed = SQL_TYPES.get(str(decl).upper())
        if allowed is None or not IDENT.match(col):
            continue
        for kind, n in q(f"SELECT typeof({col}), COUNT(*) FROM {table} GROUP BY 1"):
            if kind not in allowed and not (kind == "null" and not notnull):
                raise StoreError(f"{where}: damaged recording ({table}.{col}: {n} row(s) hold "
                                 f"{kind}, not {str(decl).lower()})")
