"""Every engine event of a recording in event_id order, in pieces (for `kvviz export`), so that
memory holds one piece and the chunks being merged, whatever the recording's length.

Two sorted sources are merged (docs/FORMAT.md, "events and event_chunks"): the `events` rows,
read by keyset seeks on event_id, and the decoded `event_chunks`, opened in (id_first,
chunk_id) order from one sorted cursor (SQLite sorts the headers, spilling to a temporary
file, not to memory). Every event of a chunk not yet opened has an id >= its id_first, so the
events below the next chunk's id_first (and up to the last row read) are final: they are
written, and the next chunk is opened. kvviz's writer makes one chunk per sample, lane and
kind, so only one sample's chunks overlap; a file whose overlapping chunks hold more than
HELD events at once is refused with one StoreError naming it, as is a chunk whose data holds
an id below its id_first (the order would be wrong).
"""
from __future__ import annotations

import sqlite3
from collections.abc import Iterator

import numpy as np
import pandas as pd

from kvviz.core.errors import StoreError
from kvviz.store.eventcodec import decode_chunk
from kvviz.store.schema import EVENT_COLS

HELD = 1 << 20  # events of overlapping chunks held at once (~80 MB)
GROUP_BYTES = 8 << 20  # chunk data fetched in one query
TOP = 1 << 64  # above every int64 event id
NAMES = ("event_id", *EVENT_COLS)
_COLS = ", ".join(NAMES)
Block = dict  # column name -> np.ndarray, in NAMES order, sorted by event_id


def pieces(reader, rows: int) -> Iterator[pd.DataFrame]:
    """Frames of at most `rows` events (event_id first, then EVENT_COLS), in event_id order;
    at least one (maybe empty: the columns)."""
    where = str(reader.path)
    own = _Rows(reader, max(1000, rows // 5))  # a row costs more to read than to hold
    heads = _chunks(reader, where) if reader._chunks else iter(())
    nxt = next(heads, None)
    opened: list[Block] = []
    ready: list[Block] = []
    yielded = False
    while True:
        own.fill()
        while nxt is not None and _held(opened) < rows:  # opened early: fewer merges
            opened.append(_block(*nxt, where))
            nxt = next(heads, None)
        bound = TOP if nxt is None else nxt[1]
        cut = min(bound, own.last + 1 if own.more else TOP)  # ids below it are final
        masks = [b["event_id"] < cut for b in (own.buf, *opened)]
        if not any(m.any() for m in masks):
            if nxt is None:
                break
            head, nxt = nxt, next(heads, None)
            opened.append(_block(*head, where))  # needed before anything else is final
            if len(opened) > 1 and _held(opened) > HELD:
                raise StoreError(f"{where}: event chunks whose event ids overlap hold more "
                                 f"than {HELD:,} events at once (at event_chunks row "
                                 f"{head[0]}); kvviz writes one chunk per sample, lane and "
                                 "kind, and export merges at most that many")
            continue
        parts = [_take(b, m) for b, m in zip((own.buf, *opened), masks) if m.any()]
        own.buf = _take(own.buf, ~masks[0])
        opened = [_take(b, ~m) for b, m in zip(opened, masks[1:]) if not m.all()]
        ready.append(_take(_concat(parts), None))
        if _held(ready) >= rows:
            whole = _concat(ready)
            end = _held(ready) - _held(ready) % rows
            for k in range(0, end, rows):
                yield _frame({c: a[k:k + rows] for c, a in whole.items()})
            ready = [{c: a[end:] for c, a in whole.items()}]
            yielded = True
    if _held(ready) or not yielded:
        yield _frame(_concat(ready) if ready else own.buf)


def _held(blocks: list[Block]) -> int:
    return sum(len(b["event_id"]) for b in blocks)


def _take(b: Block, mask) -> Block:
    """The events of `b` where `mask` (None: all of them, sorted by event_id, stable)."""
    if mask is None:
        mask = np.argsort(b["event_id"], kind="stable")
    return {c: a[mask] for c, a in b.items()}


def _concat(blocks: list[Block]) -> Block:
    if len(blocks) == 1:
        return blocks[0]
    return {c: np.concatenate([b[c] for b in blocks]) for c in NAMES}


def _frame(b: Block) -> pd.DataFrame:
    return pd.DataFrame({c: b[c] for c in NAMES})


class _Rows:
    """The `events` rows in event_id order, one buffered piece at a time (keyset seeks)."""

    def __init__(self, reader, rows: int) -> None:
        self.reader, self.rows, self.last, self.more = reader, rows, None, True
        self.buf = _columns(reader._df(f"SELECT {_COLS} FROM events LIMIT 0"), "")

    def fill(self) -> None:
        if len(self.buf["event_id"]) or not self.more:
            return
        cond, params = ("", ()) if self.last is None else (" WHERE event_id > ?", (self.last,))
        df = self.reader._df(f"SELECT {_COLS} FROM events{cond} ORDER BY event_id "
                             f"LIMIT {int(self.rows)}", params)
        self.more = len(df) == self.rows
        if len(df):
            self.buf = _columns(df, str(self.reader.path))
            self.last = int(self.buf["event_id"][-1])


def _columns(df: pd.DataFrame, where: str) -> Block:
    """A frame's columns as arrays (text as objects); event_id must be integers."""
    out = {c: df[c].to_numpy(dtype=object if df[c].dtype == object or
                             pd.api.types.is_string_dtype(df[c].dtype) else None)
           for c in NAMES}
    if not len(df):
        out["event_id"] = np.empty(0, np.int64)
    elif out["event_id"].dtype.kind != "i":
        raise StoreError(f"{where}: damaged events (events.event_id holds values that are not "
                         "integers)")
    return out


def _chunks(reader, where: str) -> Iterator[tuple]:
    """(chunk_id, id_first, lane, kind, n, encoding, data) in (id_first, chunk_id) order; the
    data fetched for a group of headers at once."""
    try:
        cur = reader.conn.execute(
            "SELECT chunk_id, id_first, lane, kind, n, encoding, length(data) FROM "
            "event_chunks ORDER BY id_first, chunk_id")
        group, size = [], 0
        for head in cur:
            if not all(isinstance(v, int) and not isinstance(v, bool) for v in head[:2]):
                raise StoreError(f"{where}: damaged events (event_chunks row {head[0]!r:.40}: "
                                 f"id_first {head[1]!r:.40} is not an integer)")
            group.append(head)
            size += head[6] if isinstance(head[6], int) else 0
            if size >= GROUP_BYTES or len(group) >= 256:
                yield from _with_data(reader, group)
                group, size = [], 0
        yield from _with_data(reader, group)
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"{where}: cannot read the recording ({exc})") from None


def _with_data(reader, group: list[tuple]) -> Iterator[tuple]:
    if not group:
        return
    ids = [h[0] for h in group]
    data = dict(reader.conn.execute(f"SELECT chunk_id, data FROM event_chunks WHERE chunk_id "
                                    f"IN ({', '.join('?' * len(ids))})", ids).fetchall())
    for head in group:
        yield (*head[:6], data.get(head[0]))


def _block(cid: int, first: int, lane, kind, n, encoding, data, where: str) -> Block:
    """One chunk's events, sorted by event_id; StoreError when it does not decode or holds an
    id below its id_first."""
    try:
        c = decode_chunk(n, encoding, data)
    except ValueError as exc:
        raise StoreError(f"{where}: damaged events ({lane!r:.40} {kind!r:.40} events: "
                         f"{exc})") from None
    if n and int(c["event_id"].min()) < first:
        raise StoreError(f"{where}: damaged events (event_chunks row {cid}: id_first {first}, "
                         f"but its data holds event id {int(c['event_id'].min())})")
    const = {"lane": lane, "kind": kind, "reason": None, "largest_hole_tokens": 0, "count": 1}
    b = {name: c[name] if name in c else np.full(n, const[name],
                                                   object if name in ("lane", "kind", "reason")
                                                   else np.int64) for name in NAMES}
    return _take(b, None)
