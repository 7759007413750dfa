"""`kvviz export`'s `blocks` table: every kept block map decoded, one row per block.

Columns sample_id, lane, t, step, block (address order, 0..num_blocks-1), owner, filled,
allocated, refcount, cached: the five planes of docs/FORMAT.md as plain columns, so pandas,
DuckDB or Polars query them without knowing the encoding. Written map by map (one Parquet row
group or one CSV append per map), so memory holds one map whatever the recording's length.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

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


def write(reader, index, tmp: Path, fmt: str) -> None:
    """The blocks table into `tmp` as Parquet or CSV."""
    if fmt == "parquet":
        import pyarrow.parquet as pq

        with pq.ParquetWriter(tmp, _schema()) as out:
            for batch in _batches(reader, index):
                out.write_batch(batch)
        return
    import pyarrow.csv as pcsv

    with open(tmp, "wb") as fh:  # a plain header line, as pandas writes one (export's check)
        fh.write((",".join(COLUMNS) + "\n").encode())
        with pcsv.CSVWriter(fh, _schema(), write_options=pcsv.WriteOptions(
                include_header=False)) as out:
            for batch in _batches(reader, index):
                out.write_batch(batch)
