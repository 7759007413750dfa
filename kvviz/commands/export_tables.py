"""`kvviz export`'s tables written piece by piece (kvviz/store/chunks.py), every file staged.

Memory holds one piece of one table (at most chunks.CHUNK_ROWS rows) whatever the recording's
length; the engine events are the exception, read whole (their chunks decode into one frame).
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


def _schema(first: pd.DataFrame, declared: dict[str, str]):
    import pyarrow as pa

    inferred = pa.Schema.from_pandas(first, preserve_index=False)
    fields = []
    for f in inferred:
        kind = ARROW.get(declared.get(f.name, "").upper())
        fields.append(pa.field(f.name, pa.type_for_alias(kind)) if kind else
                      pa.field(f.name, pa.string() if pa.types.is_null(f.type) else f.type))
    return pa.schema(fields)


def write_parquet(tmp: Path, pieces: Iterator[pd.DataFrame], declared: dict[str, str]) -> int:
    """The pieces into one Parquet file (one row group each); returns the rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows, writer = 0, None
    try:
        for df in pieces:
            if writer is None:
                writer = pq.ParquetWriter(tmp, _schema(df, declared))
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


def declared_types(reader, name: str) -> dict[str, str]:
    """column -> declared SQLite type of table `name` ({} for a table it does not have)."""
    if not reader.has_table(name):
        return {}
    return {r[1]: str(r[2]) for r in reader._q(f"PRAGMA table_info({name})")}
