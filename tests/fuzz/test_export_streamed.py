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
