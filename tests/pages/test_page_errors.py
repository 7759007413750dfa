"""Bad input: a malformed recording is an st.error with the reason; a collector that cannot
start is an error with its last message, one killed under us stopped unexpectedly. Never a
traceback."""
from __future__ import annotations

import os
import shutil
import signal
import sqlite3
from pathlib import Path

import pytest

from pages import democollector
from tests.pages.apptest_fixtures import use_collector
from tests.pages.pagehelpers import no_exception, page, rerun_until, shown

RUN_PAGES = ("pages/live.py", "pages/replay.py", "pages/gpu.py")


def errors(at) -> str:
    return " ".join(shown(e) for e in at.error)


@pytest.mark.parametrize("path", RUN_PAGES)
def test_not_a_recording_is_an_error_message(runs: Path, path: str):
    (runs / "bad.db").write_bytes(b"this is not sqlite at all" * 10)
    at = page(path, run="bad.db")
    no_exception(at)
    assert "not a SQLite database" in errors(at)


@pytest.mark.parametrize("path", RUN_PAGES)
def test_truncated_recording_is_an_error_message(runs: Path, path: str):
    data = (runs / "rec.db").read_bytes()
    (runs / "cut.db").write_bytes(data[: len(data) // 3])
    at = page(path, run="cut.db")
    no_exception(at)
    assert "cut.db" in errors(at)


@pytest.mark.parametrize("path", ["pages/live.py", "pages/replay.py"])
def test_damaged_block_map_is_an_error_message(runs: Path, path: str):
    shutil.copy(runs / "rec.db", runs / "damaged.db")
    with sqlite3.connect(runs / "damaged.db") as conn:
        conn.execute("UPDATE blockmaps SET owner = x'00112233'")
    at = page(path, run="damaged.db")
    no_exception(at)
    assert "damaged" in errors(at)


def test_dead_collector_shows_an_error_with_its_last_message(runs: Path, monkeypatch):
    use_collector(monkeypatch, "kvviz_no_such_collector_module")
    at = page("app.py")
    rerun_until(at, lambda a: any("Collector error (exit code 1)" in e.value for e in a.error))
    assert any("No module named" in c.value for c in at.code)
    assert at.title[0].value == "Live KV cache"  # the page keeps working


def test_collector_that_is_killed_later_is_shown_stopped_unexpectedly(runs: Path):
    at = page("app.py")
    rerun_until(at, lambda a: any("Collector running" in s.value for s in a.success))
    os.kill(democollector.collector().status().pid, signal.SIGKILL)  # the collector dies under us
    rerun_until(at, lambda a: any("Collector stopped unexpectedly (killed by SIGKILL)"
                                  in w.value for w in a.warning))
    no_exception(at)


@pytest.mark.parametrize("path", ["pages/live.py", "pages/replay.py", "pages/gpu.py"])
def test_a_run_left_running_by_a_kill_shows_as_stopped_unexpectedly(runs: Path, path: str):
    shutil.copy(runs / "rec.db", runs / "killed.db")
    with sqlite3.connect(runs / "killed.db") as conn:
        conn.execute("UPDATE run SET status = 'running', heartbeat_unix = 1000")
    conn.close()
    at = page(path, run="killed.db")
    no_exception(at)
    shown = " ".join(c.value for c in at.caption) + " ".join(w.value for w in at.warning)
    assert "stopped unexpectedly" in shown
