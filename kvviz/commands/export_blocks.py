"""`kvviz export`'s `blocks` table: every kept block map decoded, one row per block.

Columns sample_id, lane, t, step, block (address order, 0..num_blocks-1), owner, filled,
allocated, refcount, cached: the five planes of docs/FORMAT.md as plain columns, so pandas,
DuckDB or Polars query them without knowing the encoding. Written map by map (one Parquet row
group or one CSV append per map), so memory holds one map whatever the recording's length.

`--maps` chooses the maps (`choose`): `all`, `none` (the table is written with its header
only), `thin:N` (every Nth kept map of each lane, and each lane's last), or `auto` (the
default: all while the table stays within AUTO_ROWS rows, else thinned just enough to fit).
"""
from __future__ import annotations

import itertools
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pandas as pd

from kvviz.core.errors import StoreError
from kvviz.store import checks as check

# the maps `thin:N` keeps: each lane's 0th, Nth, 2Nth, ... and its last (sample_id order)
_THIN = ("SELECT {cols} FROM (SELECT sample_id, lane, t, step, ROW_NUMBER() OVER (PARTITION "
         "BY lane ORDER BY sample_id) - 1 AS k_, COUNT(*) OVER (PARTITION BY lane) AS n_ FROM "
         "blockmaps) WHERE k_ % ? = 0 OR k_ = n_ - 1")
GROUP_ROWS = 1 << 18  # blocks rows of a Parquet row group (~4 MB)
AUTO_ROWS = 2_000_000  # blocks rows `auto` writes at most (~80 MB of CSV)
BLOCKS_HELP = ("which block maps the blocks table decodes: all, none, thin:N (every Nth map "
               "of each lane, and its last) or auto (default: all up to "
               f"{AUTO_ROWS:,} rows, else thinned to fit)")
COLUMNS = ("sample_id", "lane", "t", "step", "block", "owner", "filled", "allocated",
           "refcount", "cached")


def _schema():
    import pyarrow as pa

    return pa.schema([("sample_id", pa.int64()), ("lane", pa.string()), ("t", pa.float64()),
                      ("step", pa.int64()), ("block", pa.int32()), ("owner", pa.int32()),
                      ("filled", pa.int32()), ("allocated", pa.int32()),
                      ("refcount", pa.int16()), ("cached", pa.bool_())])


def _batches(reader, index):
    """One Arrow record batch per kept map, in sample_id order (decoded through the reader's
    bounded, checked decoder: a damaged map is a StoreError naming it)."""
    import pyarrow as pa

    schema = _schema()
    for sid, lane, t, step in index:
        bm = reader.blockmap(sid)
        n = bm.num_blocks
        yield pa.record_batch([
            pa.array(np.full(n, sid, np.int64)),
            pa.DictionaryArray.from_arrays(np.zeros(n, np.int32), [lane]).dictionary_decode(),
            pa.array(np.full(n, t, np.float64)), pa.array(np.full(n, step, np.int64)),
            pa.array(np.arange(n, dtype=np.int32)), pa.array(bm.owner), pa.array(bm.filled),
            pa.array(bm.allocated), pa.array(bm.refcount), pa.array(bm.cached)], schema=schema)


def index(reader, every: int) -> Iterator[tuple]:
    """(sample_id, lane, t, step) of every `every`th kept map of each lane and each lane's
    last (none for 0), in sample_id order, checked, a few thousand at a time: SQLite numbers
    each lane's maps (a window query, sorted on disk past its cache), so memory holds no
    index whatever the number of maps."""
    if every < 1:
        return
    sql = ("SELECT sample_id, lane, t, step FROM blockmaps ORDER BY sample_id" if every == 1
           else _THIN.format(cols="sample_id, lane, t, step") + " ORDER BY sample_id")
    try:
        cur = reader.conn.execute(sql, () if every == 1 else (every,))
        while rows := cur.fetchmany(4096):
            df = check.frame(pd.DataFrame(rows, columns=["sample_id", "lane", "t", "step"]),
                             "blockmaps", str(reader.path), text=("lane",),
                             numeric=("sample_id", "step"))
            yield from zip(df["sample_id"].astype("int64").tolist(), df["lane"].tolist(),
                           df["t"].astype("float64").tolist(),
                           df["step"].astype("int64").tolist())
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"{reader.path}: cannot read the recording ({exc})") from None


def write(reader, index: Callable[[], Iterator[tuple]], tmp: Path, fmt: str) -> int:
    """The blocks table into `tmp` as Parquet or CSV (the maps `index()` names); returns its
    rows."""
    rows = 0
    if fmt == "parquet":  # maps gathered into row groups: each group's footer entry stays
        import pyarrow as pa  # in memory until the file is closed
        import pyarrow.parquet as pq

        with pq.ParquetWriter(tmp, _schema()) as out:
            group: list = []
            for batch in itertools.chain(_batches(reader, index()), [None]):
                if batch is not None:
                    group.append(batch)
                    rows += batch.num_rows
                if group and (batch is None or sum(b.num_rows for b in group) >= GROUP_ROWS):
                    out.write_table(pa.Table.from_batches(group), row_group_size=1 << 30)
                    group = []
        return rows
    import pyarrow.csv as pcsv

    with open(tmp, "wb") as fh:  # a plain header line, as pandas writes one (export's check)
        fh.write((",".join(COLUMNS) + "\n").encode())
        with pcsv.CSVWriter(fh, _schema(), write_options=pcsv.WriteOptions(
                include_header=False)) as out:
            for batch in _batches(reader, index()):
                out.write_batch(batch)
                rows += batch.num_rows
    return rows


def parse_choice(text: str) -> tuple[str, int]:
    """`--maps` text -> (kind, N); ValueError naming what is accepted."""
    kind, _, n = text.partition(":")
    if kind in ("all", "none", "auto") and not n:
        return kind, 1
    if kind == "thin" and n.isdigit() and 1 <= int(n) <= 10**9 and len(n) <= 10:
        return kind, int(n)
    raise ValueError(f"--maps {text[:40]!r}: expected all, none, auto or thin:N with N in "
                     "1..1000000000")


def choose(reader, choice: tuple[str, int], rows: int) -> tuple[int, int, str]:
    """(every: which maps of each lane `index` keeps, 0 for none; how many it keeps; a note
    saying what was left out: "" for none of them). Counted in SQL."""
    kind, n = choice
    total = int(reader._q("SELECT COUNT(*) FROM blockmaps")[0][0])
    if kind == "none":
        return 0, 0, f"left out ({total} block maps, --maps none)"
    if kind == "auto":
        n = -(-rows // AUTO_ROWS) if rows > AUTO_ROWS else 1
    kept = total if n == 1 else int(reader._q(
        f"SELECT COUNT(*) FROM ({_THIN.format(cols='1')})", (n,))[0][0])
    if kept == total:
        return n, kept, ""
    why = (f"the whole table would be {rows:,} rows; --maps all writes it"
           if kind == "auto" else f"--maps thin:{n}")
    return n, kept, f"every {n}th block map of each lane ({why})"
