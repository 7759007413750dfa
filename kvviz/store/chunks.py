"""A recording's tables read in pieces (for `kvviz export`), so that memory holds one piece
whatever the recording's length. A piece is at most CHUNK_ROWS rows and PIECE_BYTES bytes as
stored (a single longer row is a piece of its own: one value is bounded by docs/FORMAT.md's
bounds, not by the length). Each piece is checked as the whole-table readers check theirs
(RunReader.samples, .events, .device_memory, .table): a damaged value is one StoreError.

Pieces follow the rowid (samples: sample_id, which is time order: samples are written in time
order), each query one range seek: `WHERE rowid > last AND rowid <= cut ORDER BY rowid`, the
cut found from the rows' stored lengths first (SQLite tells a blob's length without reading
it). The engine events merge two tables in event_id order (event_stream.py).
"""
from __future__ import annotations

from collections.abc import Iterator

import pandas as pd

from kvviz.core.errors import StoreError
from kvviz.store import checks as check
from kvviz.store import event_stream
from kvviz.store.schema import EVENT_COLS

CHUNK_ROWS = 20_000  # a samples piece of ~25 columns: ~5 MB in pandas, more as it is read
PIECE_BYTES = 16 << 20  # stored bytes of a piece (blobs and text as stored, 8 a number)
EVENT_NUMERIC = tuple(c for c in EVENT_COLS if c not in ("lane", "kind", "reason"))


def table(reader, name: str, rows: int | None = None) -> Iterator[pd.DataFrame]:
    """Table `name` as stored (blobs as bytes), in rowid order, in pieces; the declared types
    checked first over the whole table (SQL only). At least one piece (maybe empty: the
    columns)."""
    if not check.IDENT.match(name) or not reader.has_table(name):
        raise StoreError(f"{reader.path}: no table {name!r}")
    check.declared_types(reader._q, name, str(reader.path))
    yield from _pieces(reader, name, "rowid", rows, lambda df: df)


def samples(reader, rows: int | None = None) -> Iterator[pd.DataFrame]:
    """The samples table in sample_id (= time) order, in checked pieces."""
    yield from _pieces(reader, "samples", "sample_id", rows, reader._samples_frame)


def device_memory(reader, rows: int | None = None) -> Iterator[pd.DataFrame]:
    """device_memory in row order, in pieces checked as RunReader.device_memory checks them."""
    def checked(df: pd.DataFrame) -> pd.DataFrame:
        check.frame(df, "device_memory", str(reader.path), need=("row_id", "t"),
                    numeric=("row_id", "device_index"), suffix="_bytes")
        return df.drop(columns="row_id")

    yield from _pieces(reader, "device_memory", "row_id", rows, checked)


def events(reader, rows: int | None = None) -> Iterator[pd.DataFrame]:
    """Every engine event (rows and chunks) in event_id order, in checked pieces (the columns
    of RunReader.events)."""
    for df in event_stream.pieces(reader, CHUNK_ROWS if rows is None else rows):
        yield check.frame(df.drop(columns="event_id"), "events", str(reader.path),
                          need=EVENT_COLS, text=("lane", "kind", "reason"),
                          numeric=EVENT_NUMERIC)


def _size_sql(reader, name: str) -> str:
    """SQL for a row's stored bytes (no blob is read to tell its length)."""
    cols = ['"' + str(r[1]).replace('"', '""') + '"'
            for r in reader._q(f"PRAGMA table_info({name})")]
    return " + ".join(f"(CASE typeof({c}) WHEN 'blob' THEN length({c}) WHEN 'text' THEN "
                      f"length(CAST({c} AS BLOB)) ELSE 8 END)" for c in cols) or "0"


def _cut(reader, name: str, key: str, size: str, last: int | None, rows: int) -> int | None:
    """The key of the last row of the next piece (None: no rows left)."""
    cond, params = ("", ()) if last is None else (f" WHERE {key} > ?", (last,))
    cut, total = None, 0
    for k, n in reader._q(f"SELECT {key}, {size} FROM {name}{cond} ORDER BY {key} "
                          f"LIMIT {int(rows)}", params):
        total += n if isinstance(n, int) else 0
        if cut is not None and total > PIECE_BYTES:
            break
        cut = k
    return cut


def _pieces(reader, name: str, key: str, rows: int | None, checked) -> Iterator[pd.DataFrame]:
    rows = CHUNK_ROWS if rows is None else rows
    size = _size_sql(reader, name)
    last, first = None, True
    while True:
        cut = _cut(reader, name, key, size, last, rows)
        if cut is None:
            if first:  # the columns, no rows
                yield checked(reader._df(f"SELECT * FROM {name} LIMIT 0"))
            return
        cond, params = ("", (cut,)) if last is None else (f"{key} > ? AND ", (last, cut))
        df = reader._df(f"SELECT * FROM {name} WHERE {cond}{key} <= ? ORDER BY {key}", params)
        yield checked(df)
        first, last = False, cut
