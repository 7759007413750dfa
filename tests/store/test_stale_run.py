"""A run that still says "running" but whose writer stopped committing long ago (killed) is
shown as "stopped unexpectedly"; a live one, and a closed one, as what they say."""
from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from kvviz.store.liveness import STALE_S, STOPPED_UNEXPECTEDLY
from kvviz.store.reader import RunReader
from kvviz.store.writer import RunWriter


def running(path: Path, meta: dict | None = None) -> RunWriter:
    w = RunWriter(path, meta or {"mode": "sim", "lanes": []})
    w.add_sample(0.0, 1, "a", {"used_tokens": 1})
    w.commit()
    return w


def age_heartbeat(path: Path, seconds: float) -> None:
    db = sqlite3.connect(path)
    with db:
        db.execute("UPDATE run SET heartbeat_unix = ?", (time.time() - seconds,))
    db.close()


def test_a_running_run_with_a_stale_heartbeat_is_stopped_unexpectedly(tmp_path):
    w = running(tmp_path / "r.db")
    age_heartbeat(tmp_path / "r.db", STALE_S + 5)
    r = RunReader(tmp_path / "r.db")
    assert (r.status, r.state) == ("running", STOPPED_UNEXPECTEDLY)
    assert r.summary()["state"] == STOPPED_UNEXPECTEDLY
    r.close()
    w.close()


def test_a_running_run_with_a_fresh_heartbeat_is_running(tmp_path):
    w = running(tmp_path / "r.db")
    r = RunReader(tmp_path / "r.db")
    assert r.state == "running"
    r.close()
    w.close()


def test_a_slow_scrape_recording_gets_three_intervals_before_it_is_stale(tmp_path):
    w = running(tmp_path / "n.db", {"mode": "node", "lanes": [], "scrape": {"interval_s": 60}})
    age_heartbeat(tmp_path / "n.db", 100)
    r = RunReader(tmp_path / "n.db")
    assert r.stale_after_s == 180 and r.state == "running"
    r.close()
    w.close()


def test_a_closed_run_is_never_stale(tmp_path):
    running(tmp_path / "r.db").close("finished")
    age_heartbeat(tmp_path / "r.db", 10 * STALE_S)
    r = RunReader(tmp_path / "r.db")
    assert r.state == "finished"
    r.close()
