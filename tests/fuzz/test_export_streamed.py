"""Round 3, item 1 (export): the tables are written in pieces of at most CHUNK_ROWS rows
(kvviz/store/chunks.py), staged: a damaged row in a late piece replaces nothing.

Before: a 10^6-sample recording took `export --csv` to 2.16 GB (every table read whole);
benchmarks/bench_inputs.py round3 --only export measures it now (docs/RELIABILITY.md).
"""
from __future__ import annotations

import sqlite3

import pandas as pd
import pytest

import kvviz.store.chunks as chunks
from kvviz.store.reader import RunReader
from tests.fuzz.hostile import check_property, make_recording, run_cli


@pytest.fixture
def rec(tmp_path, monkeypatch):
    monkeypatch.setattr(chunks, "CHUNK_ROWS", 2)
    return make_recording(tmp_path / "r.db")  # 6 samples, 6 block maps: 3 pieces each


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_pieces_add_up_to_the_whole_table(rec, tmp_path, fmt):
    argv = ["export", str(rec), f"--{fmt}", str(tmp_path / "out")]
    res = run_cli(argv)
    check_property("export", argv, res)
    assert res.code == 0, res.err
    got = (pd.read_csv if fmt == "csv" else pd.read_parquet)(tmp_path / "out" / f"samples.{fmt}")
    r = RunReader(rec)
    try:
        whole, maps = r.samples(), r.table("blockmaps")
    finally:
        r.close()
    assert got["sample_id"].tolist() == whole["sample_id"].tolist()
    assert got["t"].tolist() == pytest.approx(whole["t"].tolist())
    got_maps = (pd.read_csv if fmt == "csv" else pd.read_parquet)(
        tmp_path / "out" / f"blockmaps.{fmt}")
    assert got_maps["sample_id"].tolist() == maps["sample_id"].tolist()
    if fmt == "parquet":
        assert got_maps["owner"].tolist() == maps["owner"].tolist()  # blobs kept byte for byte


def test_a_damaged_row_in_a_late_piece_replaces_nothing(rec, tmp_path):
    out = tmp_path / "out"
    assert run_cli(["export", str(rec), "--csv", str(out)]).code == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    with sqlite3.connect(rec) as db:
        db.execute("UPDATE samples SET t = 'x' WHERE sample_id = (SELECT MAX(sample_id) "
                   "FROM samples)")
    argv = ["export", str(rec), "--csv", str(out), "--overwrite"]
    res = run_cli(argv)
    check_property("export", argv, res)
    assert res.code == 2 and "samples" in res.err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # no partial file left


def test_pieces_are_bounded_by_bytes_too(rec, tmp_path, monkeypatch):
    """A piece stops at PIECE_BYTES of stored values (blobs counted by their length, never
    read for it): here one block map a piece, the file still the whole table."""
    monkeypatch.setattr(chunks, "PIECE_BYTES", 1)
    seen = []
    real = chunks._cut
    monkeypatch.setattr(chunks, "_cut", lambda *a: seen.append(a[1]) or real(*a))
    assert run_cli(["export", str(rec), "--parquet", str(tmp_path / "p")]).code == 0
    assert seen.count("blockmaps") == 1 + 7  # the columns; then 6 maps one at a time, none left
    r = RunReader(rec)
    try:
        maps = r.table("blockmaps")
    finally:
        r.close()
    got = pd.read_parquet(tmp_path / "p" / "blockmaps.parquet")
    assert got["owner"].tolist() == maps["owner"].tolist()


def test_a_column_null_in_the_first_piece_keeps_its_later_type(rec, tmp_path):
    """The Parquet schema comes from every value of the table, not the first piece alone
    (before: NULLs first made the column text, and a later number was an error)."""
    with sqlite3.connect(rec) as db:
        db.execute("ALTER TABLE samples ADD COLUMN extra")
        db.execute("UPDATE samples SET extra = sample_id * 1.5 WHERE sample_id > 4")
    argv = ["export", str(rec), "--parquet", str(tmp_path / "p")]
    res = run_cli(argv)
    check_property("export", argv, res)
    assert res.code == 0, res.err
    got = pd.read_parquet(tmp_path / "p" / "samples.parquet")
    assert got["extra"].dtype == "float64" and got["extra"].isna().sum() == 4
