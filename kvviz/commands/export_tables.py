"""`kvviz export`'s tables written piece by piece (kvviz/store/chunks.py), every file staged.

Memory holds one piece of one table (chunks.py: at most CHUNK_ROWS rows and PIECE_BYTES
stored bytes; the engine events merged in event_id order, event_stream.py) whatever the
recording's length. Parquet files get one schema from every value of the table (column_types).
Every file is first written to a temporary file beside its target; only when all of them are
complete do they replace their targets, so a damaged row found in a late piece leaves every
earlier export untouched and no partial file behind.
"""
from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pandas as pd

from kvviz.core import safeio

Pieces = Callable[[], Iterator[pd.DataFrame]]
# SQLite declared types -> Arrow types, so every piece of a Parquet file has one schema
ARROW = {"INTEGER": "int64", "REAL": "float64", "TEXT": "string", "BLOB": "binary"}


class Staged:
    """Temporary files beside their targets; `commit` replaces the targets, `discard` (also on
    any failure inside `with`) removes the temporaries."""

    def __init__(self) -> None:
        self.files: list[tuple[Path, Path]] = []

    def new(self, target: Path) -> Path:
        try:
            fd, name = tempfile.mkstemp(prefix=f".{target.name[:40]}.", suffix=".partial",
                                        dir=target.parent)
        except OSError as exc:
            raise safeio.PathError(f"{safeio.printable(target)}: cannot create a file in "
                                   f"{safeio.printable(target.parent)} "
                                   f"({exc.strerror or exc})") from None
        os.fchmod(fd, 0o666 & ~safeio._umask())
        os.close(fd)
        self.files.append((Path(name), target))
        return Path(name)

    def commit(self) -> None:
        for tmp, target in self.files:
            os.replace(tmp, target)
        self.files = []

    def discard(self) -> None:
        for tmp, _ in self.files:
            tmp.unlink(missing_ok=True)
        self.files = []

    def __enter__(self) -> Staged:
        return self

    def __exit__(self, *exc: object) -> None:
        self.discard()


def _schema(first: pd.DataFrame, types: dict[str, tuple[str, bool]]):
    """The first piece's Arrow schema, corrected by what the whole table holds: a declared
    type wins; a column all NULL in the first piece takes the type its values have later
    (text when none), an integer one REAL when later values are."""
    import pyarrow as pa

    fields = []
    for f in pa.Schema.from_pandas(first, preserve_index=False):
        kind, declared = types.get(f.name, ("", False))
        if declared or (kind and pa.types.is_null(f.type)) or (
                kind == "REAL" and pa.types.is_integer(f.type)):
            f = pa.field(f.name, pa.type_for_alias(ARROW[kind]))
        elif pa.types.is_null(f.type):
            f = pa.field(f.name, pa.string())
        fields.append(f)
    return pa.schema(fields)


def write_parquet(tmp: Path, pieces: Iterator[pd.DataFrame],
                  types: dict[str, tuple[str, bool]]) -> int:
    """The pieces into one Parquet file (one row group each); returns the rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows, writer = 0, None
    try:
        for df in pieces:
            if writer is None:
                writer = pq.ParquetWriter(tmp, _schema(df, types))
            writer.write_table(pa.Table.from_pandas(df, schema=writer.schema,
                                                    preserve_index=False))
            rows += len(df)
    finally:
        if writer is not None:
            writer.close()
    return rows


def write_csv(tmp: Path, pieces: Iterator[pd.DataFrame], drop: tuple[str, ...]) -> int:
    """The pieces into one CSV file (the header once), binary columns left out."""
    rows = 0
    with open(tmp, "w", encoding="utf-8", newline="") as fh:
        for i, df in enumerate(pieces):
            df = df.drop(columns=[c for c in drop if c in df.columns])
            df.to_csv(fh, index=False, header=i == 0)
            rows += len(df)
    return rows


# what event_chunks' columns hold (eventcodec.CHUNK_COLS; reason NULL, the last two constants)
CHUNK_TYPES = {"t": "REAL", "step": "INTEGER", "lane": "TEXT", "kind": "TEXT",
               "seq_id": "INTEGER", "need_tokens": "INTEGER", "free_tokens": "INTEGER",
               "largest_hole_tokens": "INTEGER", "count": "INTEGER"}
_ORDER = ("BLOB", "TEXT", "REAL", "INTEGER")  # a column holding several: the first of them


def column_types(reader, name: str) -> dict[str, tuple[str, bool]]:
    """column -> (SQLite type, declared) of table `name` ({} for a table it does not have):
    the declared type, else the first of _ORDER its values hold (one pass over the table: a
    column NULL in a first piece and numbers later is still a number column); `events` with
    the types of the chunks."""
    if not reader.has_table(name):
        return {}
    info = [(str(r[1]), str(r[2]).upper()) for r in reader._q(f"PRAGMA table_info({name})")]
    if not info:
        return {}
    scan = [c for c, decl in info if decl not in ARROW]  # a declared type wins: not read
    rank = " ".join(f"WHEN '{k.lower()}' THEN {len(_ORDER) - i}" for i, k in enumerate(_ORDER))
    quoted = ['"' + c.replace('"', '""') + '"' for c in scan]
    held = dict(zip(scan, reader._q("SELECT " + ", ".join(
        f"MAX(CASE typeof({q}) {rank} ELSE 0 END)" for q in quoted) + f" FROM {name}")[0]
    )) if scan else {}
    chunks = name == "events" and reader.has_table("event_chunks")
    out = {}
    for col, decl in info:
        kinds = [_ORDER[len(_ORDER) - held[col]]] if held.get(col) else []
        if chunks and col in CHUNK_TYPES:
            kinds.append(CHUNK_TYPES[col])
        kind = decl if decl in ARROW else min(kinds, key=_ORDER.index, default="")
        if kind:
            out[col] = (kind, decl in ARROW)
    return out
