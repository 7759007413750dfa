"""Round 3, item 4: the verifier trusts nothing, and info / export / Replay refuse what it does.

Before: format_version 99 or 2^62 passed (exit 0, "0 mismatches") while info and export
refused it; run.status's escapes were printed as raw ESC bytes; a FIFO or a directory was "no
such file"; lanes of block_size 0 and owners of 2^31 - 1 or -7 passed everywhere.
"""
from __future__ import annotations

import json
import os
import sqlite3

import hypothesis.strategies as hs
import pytest
from hypothesis import HealthCheck, given, settings

from kvviz.core.blockmap import empty_blockmap
from kvviz.core.errors import StoreError
from kvviz.core.metrics import compute
from kvviz.store.writer import RunWriter
from kvviz.verify.__main__ import main as verify_main
from kvviz.verify.core import verify
from kvviz.verify.header import Unreadable
from tests.fuzz.hostile import check_property, make_recording, run_cli

LANE = "paged:16"


def one_map(path, owner: int, meta_block_size: int = 16):
    """A recording of one paged map of 8 blocks whose block 0 is owned by `owner`."""
    w = RunWriter(path, {"mode": "sim", "lanes": [{"name": LANE, "block_size": meta_block_size,
                                                   "num_blocks": 8}]})
    bm = empty_blockmap(8, 16, label=LANE)
    bm.owner[0], bm.filled[0], bm.allocated[0], bm.refcount[0] = owner, 16, 16, 1
    w.add_sample(0.0, 1, LANE, compute(bm).as_dict(), bm)
    w.commit()
    w.close("finished", "")
    return path


def _edit(path, sql: str, *args) -> None:
    with sqlite3.connect(path) as db:
        db.execute(sql, args)


@pytest.mark.parametrize("version", [0, 6, 99, 2**62, -3])
def test_an_unknown_format_version_is_a_failure_not_zero_mismatches(tmp_path, version, capsys):
    rec = make_recording(tmp_path / "r.db")
    _edit(rec, "UPDATE run SET format_version = ?", version)
    with pytest.raises(Unreadable, match="format"):
        verify(rec)
    assert verify_main([str(rec)]) == 2
    assert len(capsys.readouterr().err.splitlines()) == 1


def test_every_string_printed_is_escaped(tmp_path, capsys):
    rec = make_recording(tmp_path / "r\x1b]0;x\x07.db")
    _edit(rec, "UPDATE run SET status = ?", "fin\x1b[2Jished\u202e")
    with sqlite3.connect(rec) as db:
        m = json.loads(db.execute("SELECT meta FROM run").fetchone()[0])
    m["lanes"][0]["block_size"] = "\x1b[31m"
    _edit(rec, "UPDATE run SET meta = ?", json.dumps(m))
    verify_main([str(rec)])
    out = capsys.readouterr()
    for text in (out.out, out.err):
        assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text
    assert "\\x1b[2J" in out.out and "\\u202e" in out.out


@pytest.mark.parametrize("kind", ["fifo", "dir"])
def test_a_fifo_or_directory_is_named_for_what_it_is(tmp_path, kind, capsys):
    p = tmp_path / "x.db"
    if kind == "fifo":
        os.mkfifo(p)
    else:
        p.mkdir()
    assert verify_main([str(p)]) == 2
    err = capsys.readouterr().err
    assert ("FIFO" if kind == "fifo" else "directory") in err and "no such file" not in err


@pytest.mark.parametrize("owner", [-7, 2**31 - 1])
def test_owners_out_of_range_are_mismatches_and_refused_by_export(tmp_path, owner):
    rec = one_map(tmp_path / "r.db", owner)
    rep = verify(rec)
    assert any("owner" in m and str(owner) in m for m in rep.mismatches), rep.mismatches
    argv = ["export", str(rec), "--csv", str(tmp_path / "out")]
    res = run_cli(argv)
    check_property("export", argv, res)
    assert res.code == 2 and "owners are outside" in res.err


def test_an_owner_in_range_is_exported(tmp_path):
    rec = one_map(tmp_path / "r.db", 2**31 - 2)
    res = run_cli(["export", str(rec), "--csv", str(tmp_path / "out")])
    assert res.code == 0, res.err


def test_the_replay_reader_refuses_owners_out_of_range(tmp_path):
    from kvviz.store.reader import RunReader

    r = RunReader(one_map(tmp_path / "r.db", -7))
    with pytest.raises(StoreError, match="owners are outside"):
        r.blockmap(int(r.blockmap_index(LANE).iloc[0]["sample_id"]))


@pytest.mark.parametrize("value", [0, -1, 2**31, "16", 1.5, None])
def test_a_lane_block_size_out_of_range_is_a_mismatch_and_refused(tmp_path, value):
    rec = one_map(tmp_path / "r.db", 3, meta_block_size=value)
    rep = verify(rec)
    assert any("block_size" in m for m in rep.mismatches), rep.mismatches
    for cmd in ("info", "export"):
        argv = [cmd, str(rec)] + (["--csv", str(tmp_path / "o")] if cmd == "export" else [])
        res = run_cli(argv)
        check_property(cmd, argv, res)
        assert res.code == 2 and "block_size" in res.err


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(key=hs.sampled_from(["block_size", "num_blocks", "capacity_tokens"]),
       value=hs.one_of(hs.integers(-2**70, 2**70), hs.floats(allow_nan=True),
                       hs.text(max_size=5), hs.none(), hs.booleans()))
def test_lane_fields_of_any_value_are_checked_or_in_range(tmp_path_factory, key, value):
    rec = make_recording(tmp_path_factory.mktemp("v") / "r.db")
    with sqlite3.connect(rec) as db:
        m = json.loads(db.execute("SELECT meta FROM run").fetchone()[0])
    m["lanes"][0][key] = value
    _edit(rec, "UPDATE run SET meta = ?", json.dumps(m))
    rep = verify(rec)
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= (
        0 if key == "num_blocks" else 1) and value <= {"block_size": 2**31 - 1,
                                                       "num_blocks": 2**24}.get(key, 2**60)
    flagged = any(f"{key} " in m and "outside" in m for m in rep.mismatches)
    assert flagged != ok, (key, value, rep.mismatches)
