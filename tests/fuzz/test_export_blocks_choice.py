"""#41.8: `kvviz export --maps none|thin:N|all|auto` leaves out or thins the blocks table
(before: a 1 MB, 40 s recording gave a 396 MB blocks.csv of 5.4M rows, no way to skip it)."""
from __future__ import annotations

import csv

import pytest

import kvviz.commands.export_blocks as eb
from tests.fuzz.hostile import check_property, make_recording, run_cli


@pytest.fixture(scope="module")
def rec(tmp_path_factory):
    return make_recording(tmp_path_factory.mktemp("e") / "r.db")  # 2 lanes x 3 maps


def _blocks(out) -> list[dict]:
    with open(out / "blocks.csv", newline="") as fh:
        return list(csv.DictReader(fh))


def _export(rec, out, *flags) -> str:
    argv = ["export", str(rec), "--csv", str(out), *flags]
    res = run_cli(argv)
    check_property("export", argv, res)
    assert res.code == 0, res.err
    return res.out


def test_all_is_every_map_and_none_is_a_header_only(rec, tmp_path):
    _export(rec, tmp_path / "a", "--maps", "all")
    every = _blocks(tmp_path / "a")
    assert len({r["sample_id"] for r in every}) == 6
    text = _export(rec, tmp_path / "n", "--maps", "none")
    assert _blocks(tmp_path / "n") == [] and "--maps none" in text
    assert (tmp_path / "n" / "blocks.csv").read_text().startswith("sample_id,lane")


def test_thin_keeps_every_nth_map_of_each_lane_and_its_last(rec, tmp_path):
    text = _export(rec, tmp_path / "t", "--maps", "thin:2")
    kept = _blocks(tmp_path / "t")
    per_lane: dict[str, set] = {}
    for r in kept:
        per_lane.setdefault(r["lane"], set()).add(int(r["sample_id"]))
    assert len(per_lane) == 2 and all(len(s) == 2 for s in per_lane.values())  # 1st and 3rd
    assert "thin:2" in text


def test_auto_thins_a_big_table_and_says_so(rec, tmp_path, monkeypatch):
    monkeypatch.setattr(eb, "AUTO_ROWS", 100)
    text = _export(rec, tmp_path / "u")
    assert "every" in text and "--maps all writes it" in text
    assert len({r["sample_id"] for r in _blocks(tmp_path / "u")}) < 6


@pytest.mark.parametrize("bad", ["some", "thin", "thin:0", "thin:-1", "thin:x", "thin:1e3",
                                 "all:2", "thin:99999999999", "\x1b[2J"])
def test_a_bad_choice_is_one_error_line(rec, tmp_path, bad):
    argv = ["export", str(rec), "--csv", str(tmp_path / "x"), "--maps", bad]
    res = run_cli(argv)
    check_property("export", argv, res)
    assert res.code == 2 and "--maps" in res.err and not (tmp_path / "x").exists()
