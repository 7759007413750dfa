"""`kvviz export`: decoded block maps (one row per block) and the user's umask (issue 25 item
16); `info`, `export` and the verifier say what node and KV-event recordings hold (issue 22
item 2)."""
from __future__ import annotations

import os
import stat
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kvviz.commands.cli import main
from kvviz.store.reader import RunReader
from kvviz.verify.__main__ import main as verify_main
from tests.fuzz import crafted


@pytest.fixture(scope="module")
def recs(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("holds")
    return {"engine": crafted.engine_run(d / "engine.db"), "kv": crafted.kv_run(d / "kv.db"),
            "node": crafted.node_run(d / "node.db")}


def test_blocks_table_holds_every_kept_map_decoded(recs, tmp_path):
    assert main(["export", str(recs["engine"]), "--parquet", str(tmp_path / "pq"),
                 "--csv", str(tmp_path / "csv"), "--maps", "all"]) == 0
    blocks = pd.read_parquet(tmp_path / "pq" / "blocks.parquet")
    assert blocks.dtypes["owner"] == np.int32 and blocks.dtypes["cached"] == np.bool_
    r = RunReader(recs["engine"])
    try:
        ids = r.blockmap_index()["sample_id"].tolist()
        assert sorted(blocks["sample_id"].unique().tolist()) == ids
        for sid, rows in blocks.groupby("sample_id"):
            bm = r.blockmap(sid)
            assert rows["block"].tolist() == list(range(bm.num_blocks))
            for plane in ("owner", "filled", "allocated", "refcount", "cached"):
                assert np.array_equal(rows[plane].to_numpy(), getattr(bm, plane)), plane
        samples = r.samples().set_index("sample_id")
    finally:
        r.close()
    # a query a notebook would run: used slots per map, against the recorded metric
    owned = blocks[blocks["owner"] != -1]
    used = owned.groupby("sample_id")["filled"].sum()
    assert (used == samples.loc[used.index, "used_tokens"]).all()
    csv = pd.read_csv(tmp_path / "csv" / "blocks.csv")
    assert len(csv) == len(blocks) and csv["owner"].tolist() == blocks["owner"].tolist()


@pytest.mark.parametrize("mask, mode", [(0o022, 0o644), (0o027, 0o640), (0o077, 0o600)])
def test_exported_files_get_the_users_umask(recs, tmp_path, mask, mode):
    old = os.umask(mask)
    try:
        assert main(["export", str(recs["kv"]), "--parquet", str(tmp_path / "pq")]) == 0
    finally:
        os.umask(old)
    files = list((tmp_path / "pq").iterdir())
    assert files and {stat.S_IMODE(f.stat().st_mode) for f in files} == {mode}


def test_info_export_and_verify_say_what_a_kv_event_recording_holds(recs, tmp_path, capsys):
    path = recs["kv"]
    assert main(["info", str(path)]) == 0
    out = capsys.readouterr().out
    assert "23 KV-event batches" in out and "0 events" not in out
    assert "KV events: 2 streams, 23 batches, 23 events (36 blocks stored, 3 removed), 1 gaps" \
        in out
    assert verify_main([str(path)]) == 0
    out = capsys.readouterr().out
    assert "2 KV-event streams, 23 KV-event batches, 23 KV events" in out and "1 gaps" in out
    assert main(["export", str(path), "--csv", str(tmp_path / "csv")]) == 0
    out = capsys.readouterr().out
    assert "kv_batches (23 rows)" in out and "KV events: 2 streams, 23 batches" in out


def test_info_export_and_verify_say_what_a_node_recording_holds(recs, tmp_path, capsys):
    path = recs["node"]
    assert main(["info", str(path)]) == 0
    out = capsys.readouterr().out
    assert "4 scrapes (3 ok) of http://n:8000/metrics" in out and "events" not in out
    assert verify_main([str(path)]) == 0
    assert "holds 4 scrapes, over 3.0 s" in capsys.readouterr().out
    assert main(["export", str(path), "--parquet", str(tmp_path / "pq"),
                 "--csv", str(tmp_path / "csv")]) == 0
    assert "node scrapes: 4 (3 ok)" in capsys.readouterr().out
    nodes = pd.read_parquet(tmp_path / "pq" / "node_samples.parquet")
    assert nodes["status"].tolist() == ["ok", "ok", "unreachable", "ok"]
    assert "raw_zlib" in nodes and "raw_zlib" not in pd.read_csv(tmp_path / "csv" /
                                                                 "node_samples.csv")
