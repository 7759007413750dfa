"""Round 3, items 3 and 6: `--overwrite` never replaces a recording whose writer is alive, and
a heartbeat in the future is neither a negative age nor a run that stays "running" forever.

Before: `--overwrite` on a recording another collector was writing replaced it (both exit 0,
the first run's data gone); a heartbeat 10^12 s ahead showed "-998203546598.9 s ago".
"""
from __future__ import annotations

import sqlite3
import time

import pytest

from kvviz.store import liveness
from tests.fuzz.hostile import check_property, install_fakes, make_recording, run_cli


def _set_run(path, status: str, beat: float) -> None:
    with sqlite3.connect(path) as db:
        db.execute("UPDATE run SET status = ?, heartbeat_unix = ? WHERE id = 1", (status, beat))


def _collect_over(path) -> object:
    argv = ["collect", "--mode", "sim", "--out", str(path), "--overwrite", "--duration", "1",
            "--quiet"]
    res = run_cli(argv)
    check_property("collect", argv, res)
    return res


@pytest.fixture
def rec(tmp_path, monkeypatch):
    install_fakes(monkeypatch)
    return make_recording(tmp_path / "run.db")


def test_a_running_recording_with_a_fresh_heartbeat_is_not_replaced(rec):
    _set_run(rec, "running", time.time())
    before = rec.read_bytes()
    res = _collect_over(rec)
    assert res.code == 2
    assert "its writer is still running" in res.err and "run.db" in res.err
    assert rec.read_bytes() == before


def test_a_held_write_lock_is_a_writer_too(rec):
    holder = sqlite3.connect(rec, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        res = _collect_over(rec)
        assert res.code == 2 and "write lock" in res.err
    finally:
        holder.execute("ROLLBACK")
        holder.close()


@pytest.mark.parametrize("status, age", [("running", 3600.0), ("finished", 0.0),
                                         ("running", -1e12)])
def test_a_dead_or_finished_writer_leaves_the_file_to_overwrite(rec, status, age):
    _set_run(rec, status, time.time() - age)
    assert liveness.live_writer(rec) is None
    assert _collect_over(rec).code == 0


@pytest.mark.parametrize("ahead", [1e12, 1e6, float("inf")])
def test_a_heartbeat_in_the_future_reads_as_stopped_unexpectedly(ahead):
    beat = time.time() + ahead
    assert liveness.shown_state("running", beat, {}) == liveness.STOPPED_UNEXPECTEDLY
    text = liveness.age_text(beat)
    assert "-" not in text and ("future" in text or text == "unknown")


def test_a_clock_a_little_ahead_is_still_fresh():
    assert liveness.shown_state("running", time.time() + 5, {}) == "running"
    assert liveness.age_text(time.time() - 12.34).endswith("s ago")


def test_info_says_in_the_future_never_a_negative_age(rec):
    _set_run(rec, "running", time.time() + 1e12)
    res = run_cli(["info", str(rec)])
    assert res.code == 0, res.err
    assert "stopped unexpectedly" in res.out and "in the future" in res.out
    assert " -" not in res.out.replace(" - ", "")


def test_the_verifier_says_in_the_future_too(rec):
    from kvviz.verify.core import verify

    _set_run(rec, "running", time.time() + 1e12)
    assert "in the future" in verify(rec).note


def test_the_dashboards_jobs_never_overwrite(tmp_path):
    from kvviz.runs.jobs import DEMO, run_config

    cfg = run_config(DEMO.__class__(overwrite=True), tmp_path / "x.db")
    assert cfg.overwrite is False
