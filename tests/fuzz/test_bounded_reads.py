"""`kvviz info` and `kvviz export` on recordings whose blobs are zlib bombs of several streams
(tests/fuzz/crafted.py): one clear error naming the blob, or a result, decided from the blobs'
lengths (docs/FORMAT.md, "Bounds"): the bytes the process reads stay far below the file's size,
so the answer comes in about the time of a clean file whatever the bombs declare."""
from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from kvviz.commands.cli import main as cli
from tests.fuzz import crafted

FILE_READ_CAP = 48 << 20  # bytes read from files, while the crafted file holds ~230 MB of blobs


def read_bytes() -> int:
    """Bytes this process has read through read() calls so far (/proc/self/io rchar)."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("no rchar in /proc/self/io")


@pytest.fixture(scope="module")
def engine(tmp_path_factory) -> Path:
    return crafted.engine_run(tmp_path_factory.mktemp("bounded") / "engine.db")


def bombed(src: Path, dst: Path, table: str, cols: tuple[str, ...]) -> Path:
    """A copy of src whose `cols` of `table` hold 1 GiB bombs back to back, every row: at
    least four per blob, more (up to the 16 streams a blob may hold) when the table has few
    rows, so that the file holds about 5 x FILE_READ_CAP (the rows a recording gets depend
    on how fast its engine ran)."""
    with sqlite3.connect(src) as db:
        rows = db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
    one = crafted.bomb(1)
    k = min(16, max(4, -(-5 * FILE_READ_CAP // (max(1, rows) * len(cols) * len(one)))))
    return crafted.edit(src, dst, crafted.set_blobs(table, cols, one * k, None))


@pytest.mark.parametrize("table, cols", [("blockmaps", ("lengths",)),
                                         ("blockmaps", ("owner", "final_seq")),
                                         ("event_chunks", ("data",))])
def test_export_refuses_an_oversized_blob_without_reading_the_blobs(engine, tmp_path, capsys,
                                                                   table, cols):
    path = bombed(engine, tmp_path / "b.db", table, cols)
    assert path.stat().st_size > 4 * FILE_READ_CAP
    before = read_bytes()
    code = cli(["export", str(path), "--parquet", str(tmp_path / "pq")])
    read = read_bytes() - before
    out = capsys.readouterr()
    assert code == 2 and out.err.count("error:") == 1, out.err[-1000:]
    assert "Traceback" not in out.err
    assert f"table {table} row" in out.err and "more than its row allows" in out.err, out.err
    assert read < FILE_READ_CAP, f"export read {read / 2**20:.0f} MiB to decide"
    assert not (tmp_path / "pq" / "blockmaps.parquet").exists()  # nothing written


def test_info_answers_without_reading_the_blobs(engine, tmp_path, capsys):
    path = bombed(engine, tmp_path / "b.db", "blockmaps", ("lengths", "owner"))
    before = read_bytes()
    code = cli(["info", str(path), "--json"])
    read = read_bytes() - before
    out = capsys.readouterr()
    assert code == 0, out.err[-1000:]
    assert read < FILE_READ_CAP, f"info read {read / 2**20:.0f} MiB"


def test_a_clean_recording_still_exports_every_map(engine, tmp_path, capsys):
    assert cli(["export", str(engine), "--parquet", str(tmp_path / "pq")]) == 0
    assert "block maps decoded" in capsys.readouterr().out
