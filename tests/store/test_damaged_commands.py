"""`kvviz info` / `export` on hand-edited recordings: exit 2 with one error line naming what
is wrong; `info` on a `kvviz scrape --out` recording counts its node samples."""
from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from kvviz.commands.cli import main
from kvviz.store.writer import RunWriter

DAMAGE = {  # issue 13's hand edits: (SQL, words the error names)
    "meta list": ("UPDATE run SET meta = '[]'", "must be a JSON object"),
    "meta lanes int": ("UPDATE run SET meta = '{\"lanes\": 5}'", "'lanes' must be a list"),
    "meta deep": ("UPDATE run SET meta = '" + "[" * 100_000 + "]" * 100_000 + "'",
                  "nested too deeply"),
    "meta 900 deep": ("UPDATE run SET meta = '{\"x\": " + "[" * 900 + "]" * 900 + "}'",
                      "more than 64 levels"),
    "samples t text": ("UPDATE samples SET t = 'abc' WHERE sample_id = 5", "column 't'"),
    "heartbeat text": ("UPDATE run SET heartbeat_unix = 'abc'", "heartbeat_unix"),
    "counter text": ("UPDATE samples SET admit_failures_policy = 'x'", "admit_failures_policy"),
}


def damaged(recording, tmp_path: Path, sql: str) -> Path:
    path = tmp_path / "d.db"
    shutil.copy(recording[0], path)
    with sqlite3.connect(path) as conn:
        conn.executescript(sql)
    conn.close()
    return path


@pytest.mark.parametrize("name", list(DAMAGE))
def test_info_on_a_hand_edited_recording_exits_2_with_one_line(recording, tmp_path, capsys,
                                                               name):
    sql, words = DAMAGE[name]
    assert main(["info", str(damaged(recording, tmp_path, sql))]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("kvviz info: error: ") and words in err[0]


@pytest.mark.parametrize("name", ["meta list", "meta lanes int", "samples t text",
                                  "heartbeat text"])
def test_export_of_a_hand_edited_recording_exits_2_with_one_line(recording, tmp_path, capsys,
                                                                 name):
    sql, words = DAMAGE[name]
    path = damaged(recording, tmp_path, sql)
    assert main(["export", str(path), "--csv", str(tmp_path / "csv")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("kvviz export: error: ") and words in err[0]


def test_info_counts_the_node_samples_of_a_scrape_recording(tmp_path, capsys):
    w = RunWriter(tmp_path / "node.db", {"mode": "node", "device": "node", "lanes": []})
    for i in range(3):
        w.add_node_sample(0.5 * i, {"time": 1e9 + i, "url": "http://x", "status": "ok"},
                          {"up": 1.0})
        w.commit()
    w.close("finished")
    assert main(["info", str(tmp_path / "node.db")]) == 0
    out = capsys.readouterr().out
    assert "3 scrapes (3 ok)" in out and "1.0 s" in out
