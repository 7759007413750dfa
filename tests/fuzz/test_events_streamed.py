"""Round 3, item 1 (engine events): `kvviz export` and the verifier read a recording's engine
events one piece at a time, merged in event_id order (kvviz/store/event_stream.py,
kvviz/verify/events.py), so memory no longer grows with the events.

Before: export read them as one frame and the verifier as one list of dicts (~0.5 KB each;
10^7 events: export 3.6 GB, the verifier refused at 4.2M events after 2.5 GB).
benchmarks/bench_inputs.py round3 --only events measures it (docs/RELIABILITY.md).
"""
from __future__ import annotations

import sqlite3
import tracemalloc

import pandas as pd
import pytest

import kvviz.store.chunks as chunks
import kvviz.store.event_stream as event_stream
from kvviz.store.reader import RunReader
from kvviz.verify import core, ids, replay, verify
from kvviz.verify import events as verify_events
from kvviz.verify.__main__ import main as verify_main
from tests.fuzz.hostile import check_property, run_cli
from tests.fuzz.many_events import events_recording
from tests.store.conftest import record


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    """An engine run: rows (admit_failed, preempted, ...) and chunks of three kinds."""
    path = tmp_path_factory.mktemp("ev") / "sim.db"
    record(path, steps=200, every=10, requests=200)
    return path


@pytest.fixture
def rec(sim, tmp_path):
    """A copy whose chunk_id order is the reverse of event order (the merge goes by ids)."""
    path = tmp_path / "r.db"
    path.write_bytes(sim.read_bytes())
    with sqlite3.connect(path) as db:
        db.execute("UPDATE event_chunks SET chunk_id = -chunk_id")
    return path


def _whole(path) -> pd.DataFrame:
    r = RunReader(path)
    try:
        return r.events()  # the whole-table reader: the unstreamed result
    finally:
        r.close()


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_exported_pieces_are_the_whole_events_table(rec, tmp_path, monkeypatch, fmt):
    monkeypatch.setattr(chunks, "CHUNK_ROWS", 7)
    monkeypatch.setattr(event_stream, "GROUP_BYTES", 1)  # one chunk's data a query
    argv = ["export", str(rec), f"--{fmt}", str(tmp_path / "out")]
    res = run_cli(argv)
    check_property("export", argv, res)
    assert res.code == 0, res.err
    got = (pd.read_csv if fmt == "csv" else pd.read_parquet)(tmp_path / "out" / f"events.{fmt}")
    whole = _whole(rec)
    assert len(whole) > 200 and set(whole["kind"]) >= {"admitted", "finished"}
    assert len(got) == len(whole)
    for col in ("step", "kind", "seq_id", "need_tokens", "free_tokens"):
        assert got[col].tolist() == whole[col].tolist(), col
    assert got["t"].tolist() == pytest.approx(whole["t"].tolist())


def test_the_verifier_gives_the_same_report_in_small_pieces(sim, rec, monkeypatch):
    want = verify(sim).as_dict()
    monkeypatch.setattr(verify_events, "SLICE", 3)
    monkeypatch.setattr(verify_events, "GROUP", 2)
    got = verify(rec).as_dict()
    assert want["mismatch_count"] == 0 and want["contents"]["events"] > 200
    assert {**got, "path": ""} == {**want, "path": ""}


def test_memory_does_not_grow_with_the_events(tmp_path, monkeypatch):
    """100,000 events: the whole-table code held 52 MB (verifier) and 24 MB (export) of
    Python and numpy memory; read in pieces, about 1 and 3 MB."""
    path = events_recording(tmp_path / "long.db", 100_000)
    monkeypatch.setattr(chunks, "CHUNK_ROWS", 2000)
    import pyarrow.parquet  # noqa: F401 - imported before tracing

    import kvviz.commands.export  # noqa: F401
    for run in (lambda: verify(path).mismatch_count,
                lambda: run_cli(["export", str(path), "--parquet", str(tmp_path / "p")]).code):
        tracemalloc.start()
        try:
            assert run() == 0
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 12 * 2**20, f"{peak / 2**20:.1f} MB"


def test_a_chunk_that_starts_below_its_id_first_is_one_error(rec, tmp_path):
    with sqlite3.connect(rec) as db:
        db.execute("UPDATE event_chunks SET id_first = id_first + 1 WHERE chunk_id = "
                   "(SELECT MAX(chunk_id) FROM event_chunks)")
    argv = ["export", str(rec), "--csv", str(tmp_path / "out")]
    res = run_cli(argv)
    check_property("export", argv, res)
    assert res.code == 2 and "id_first" in res.err
    assert not (tmp_path / "out" / "events.csv").exists()
    assert any("disagree with its data" in m for m in verify(rec).mismatches)


def test_overlapping_chunks_past_the_bound_are_one_error(rec, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(event_stream, "HELD", 3)
    monkeypatch.setattr(chunks, "CHUNK_ROWS", 2)  # no chunk opened before it is needed
    argv = ["export", str(rec), "--parquet", str(tmp_path / "out")]
    res = run_cli(argv)
    check_property("export", argv, res)
    assert res.code == 2 and "overlap" in res.err
    assert verify_main([str(rec), "--max-events", "3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--max-events" in err[0] and "overlap" in err[0]


def test_a_replay_past_the_live_budget_says_what_it_did_not_check(sim, monkeypatch):
    monkeypatch.setattr(replay, "MAX_LIVE", 1)
    rep = verify(sim)
    assert "not checked" in rep.note and "sequences were live at once" in rep.note
    assert rep.mismatch_count == 0  # what it could not check is not called wrong


def test_ids_past_the_bits_and_lanes_past_the_cap_are_said(sim, monkeypatch):
    monkeypatch.setattr(ids, "MAX_IDS", 10)
    monkeypatch.setattr(core, "MAX_LANES", 1)
    rep = verify(sim)
    assert "event ids above 10 were not checked for repeats" in rep.note
    assert "1 lanes past the first 1" in rep.note and len(rep.lanes) == 1
    assert rep.mismatch_count == 0  # the other lane's events are not "of no lane"


def test_ids_with_a_gap_or_a_repeat_are_a_mismatch(rec):
    with sqlite3.connect(rec) as db:
        db.execute("UPDATE events SET event_id = event_id + 1000000 WHERE event_id = "
                   "(SELECT MAX(event_id) FROM events)")
    assert any("without gaps or repeats" in m for m in verify(rec).mismatches)
