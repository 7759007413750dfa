"""`kvviz info` and `kvviz export` on a recording; bad files exit 2 with the reason."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from kvviz.commands.cli import main


def test_info_text_and_json(recording, capsys) -> None:
    path, _ = recording
    assert main(["info", str(path)]) == 0
    out = capsys.readouterr().out
    assert "finished" in out and "paged:16: 40 samples" in out
    assert main(["info", str(path), "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["samples"] == 80 and set(s["lanes"]["paged:16"]["failures"]) == {
        "capacity", "fragmentation", "policy"}


def test_info_on_a_text_file_exits_2(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "x.db"
    bad.write_text("nope")
    assert main(["info", str(bad)]) == 2
    assert f"{bad}: not a SQLite database" in capsys.readouterr().err


def test_export_parquet_and_csv(recording, tmp_path: Path) -> None:
    path, _ = recording
    assert main(["export", str(path), "--parquet", str(tmp_path / "pq"),
                 "--csv", str(tmp_path / "csv")]) == 0
    samples = pd.read_parquet(tmp_path / "pq" / "samples.parquet")
    assert len(samples) == 80 and "used_tokens" in samples
    assert len(pd.read_csv(tmp_path / "csv" / "events.csv")) > 0
    csv_cols = set(pd.read_csv(tmp_path / "csv" / "blockmaps.csv").columns)
    blobs = {"lengths", "owner", "filled", "allocated", "refcount", "cached", "final_seq",
             "final_len", "final_held"}  # binary: in Parquet only
    assert not csv_cols & blobs and {"sample_id", "lane", "encoding", "runs"} <= csv_cols
    assert blobs <= set(pd.read_parquet(tmp_path / "pq" / "blockmaps.parquet").columns)
    assert json.loads((tmp_path / "pq" / "run.json").read_text())["status"] == "finished"
