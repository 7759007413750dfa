"""A recording's tables read in pieces of at most CHUNK_ROWS rows (for `kvviz export`), so memory
holds one piece whatever the recording's length. Each piece is checked as the whole-table
readers check theirs (RunReader.samples, RunReader.table): a damaged value is one StoreError.

Pieces follow the rowid (samples: sample_id, which is time order: samples are written in time
order), each query one range seek: `WHERE rowid > last ORDER BY rowid LIMIT n`.
"""
from __future__ import annotations

from collections.abc import Iterator

import pandas as pd

from kvviz.core.errors import StoreError
from kvviz.store import checks as check

CHUNK_ROWS = 50_000  # a samples piece of ~20 columns: ~10 MB in pandas


def table(reader, name: str, rows: int | None = None) -> Iterator[pd.DataFrame]:
    """Table `name` as stored (blobs as bytes), in rowid order, in pieces; the declared types
    checked first over the whole table (SQL only). At least one piece (maybe empty: the
    columns)."""
    if not check.IDENT.match(name) or not reader.has_table(name):
        raise StoreError(f"{reader.path}: no table {name!r}")
    check.declared_types(reader._q, name, str(reader.path))
    yield from _pieces(reader, f"SELECT rowid AS _rowid_, * FROM {name}", "rowid", rows,
                       lambda df: df)


def samples(reader, rows: int | None = None) -> Iterator[pd.DataFrame]:
    """The samples table in sample_id (= time) order, in checked pieces."""
    yield from _pieces(reader, "SELECT sample_id AS _rowid_, * FROM samples", "sample_id", rows,
                       reader._samples_frame)


def _pieces(reader, select: str, key: str, rows: int | None,
            checked) -> Iterator[pd.DataFrame]:
    rows = CHUNK_ROWS if rows is None else rows
    last, first = None, True
    while True:
        cond = "" if last is None else f" WHERE {key} > ?"
        df = reader._df(f"{select}{cond} ORDER BY {key} LIMIT {int(rows)}",
                        () if last is None else (last,))
        if df.empty and not first:
            return
        keys = df.pop("_rowid_")
        yield checked(df)
        first = False
        if len(df) < rows:
            return
        last = int(keys.iloc[-1])
