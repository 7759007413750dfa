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

from pathlib import Path

import numpy as np

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


def index_of(reader) -> list[tuple]:
    """(sample_id, lane, t, step) of each kept map, in sample_id order, checked."""
    rows = reader.blockmap_index()
    if not len(rows):
        return []
    return list(zip(rows["sample_id"].astype("int64").tolist(), rows["lane"].tolist(),
                    rows["t"].astype("float64").tolist(), rows["step"].astype("int64").tolist()))


def write(reader, index, tmp: Path, fmt: str) -> int:
    """The blocks table into `tmp` as Parquet or CSV; returns its rows."""
    rows = 0
    if fmt == "parquet":
        import pyarrow.parquet as pq

        with pq.ParquetWriter(tmp, _schema()) as out:
            for batch in _batches(reader, index):
                out.write_batch(batch)
                rows += batch.num_rows
        return rows
    import pyarrow.csv as pcsv

    with open(tmp, "wb") as fh:  # a plain header line, as pandas writes one (export's check)
        fh.write((",".join(COLUMNS) + "\n").encode())
        with pcsv.CSVWriter(fh, _schema(), write_options=pcsv.WriteOptions(
                include_header=False)) as out:
            for batch in _batches(reader, index):
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


def thin(index: list[tuple], every: int) -> list[tuple]:
    """Every `every`th map of each lane, in sample_id order, each lane's last kept too."""
    if every <= 1:
        return list(index)
    seen: dict[str, int] = {}
    last = {lane: sid for sid, lane, _t, _s in index}
    out = []
    for row in index:
        k = seen.get(row[1], 0)
        seen[row[1]] = k + 1
        if k % every == 0 or last[row[1]] == row[0]:
            out.append(row)
    return out


def choose(index: list[tuple], choice: tuple[str, int], rows: int) -> tuple[list[tuple], str]:
    """(the maps to decode, a note saying what was left out: "" for all of them)."""
    kind, n = choice
    if kind == "none":
        return [], f"left out ({len(index)} block maps, --maps none)"
    if kind == "auto":
        n = -(-rows // AUTO_ROWS) if rows > AUTO_ROWS else 1
    chosen = thin(index, n)
    if len(chosen) == len(index):
        return chosen, ""
    why = (f"the whole table would be {rows:,} rows; --maps all writes it"
           if kind == "auto" else f"--maps thin:{n}")
    return chosen, f"every {n}th block map of each lane ({why})"
