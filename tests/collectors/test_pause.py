"""Pause and single-step of the dashboard's collector (kvviz/runs/control.py), with real processes:
paused, its engine clock stands still (no new time, no new steps) while it still writes; each
Step runs exactly one engine step of one step's time; Resume goes on from there."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from kvviz.runs import control, jobs, process
from kvviz.store.reader import RunReader
from tests.collectors.conftest import ROOT

SIM = jobs.demo_config(mode="sim", hz=10.0)  # 20 engine steps per second, 50 ms each


def _last(path: Path) -> tuple[float, int, int]:
    """(t, step, samples) of the recording's newest sample."""
    if not path.exists():
        return (0.0, 0, 0)
    r = RunReader(path)
    try:
        s = r.samples()
        return (float(s["t"].max()), int(s["step"].max()), len(s)) if len(s) else (0.0, 0, 0)
    finally:
        r.close()


def _until(cond, timeout_s: float, what: str):
    end = time.monotonic() + timeout_s
    while True:
        got = cond()
        if got:
            return got
        if time.monotonic() > end:
            pytest.fail(f"{what} within {timeout_s} s")
        time.sleep(0.1)


def test_pause_freezes_the_clock_step_moves_it_one_step_resume_goes_on(tmp_path):
    coll = jobs.Collector(tmp_path, cwd=ROOT)
    try:
        out = coll.start(SIM)
        _until(lambda: _last(out)[1] > 20, 60, "the collector ran 20 steps")
        coll.set_paused(True)
        _until(lambda: "paused at t =" in coll.last_message(), 10, "it paused")
        time.sleep(0.5)  # the sample of the paused state, written at once
        t0, step0, n0 = _last(out)
        time.sleep(control.PAUSED_SAMPLE_S + 1.5)
        t1, step1, n1 = _last(out)
        assert (t1, step1) == (t0, step0), "paused, yet the engine moved on"
        assert n1 > n0, "paused, it should still write (readers see it alive)"
        for k in (1, 2):
            coll.step()
            _until(lambda k=k: _last(out)[1] == step0 + k, 10, f"step {k} was recorded")
            t, _, _ = _last(out)
            assert t == pytest.approx(t0 + k / SIM.steps_per_s, abs=1e-6)
        assert coll.control() == control.Control(True, 2)
        coll.set_paused(False)
        _until(lambda: _last(out)[1] > step0 + 10, 20, "it ran on after Resume")
        t2, _, _ = _last(out)
        assert t2 < t0 + 5, "Resume jumped over the time spent paused"
    finally:
        process.stop_all()


def test_a_bad_or_missing_control_file_never_pauses(tmp_path):
    path = tmp_path / "x.control"
    assert control.read(path) == control.Control()
    for text in ("", "[]", '{"paused": "yes", "steps": 1}', '{"paused": true}', "{" * 5000):
        path.write_text(text)
        assert control.read(path) == control.Control(), text
    control.write(path, control.Control(True, 3))
    assert control.read(path) == control.Control(True, 3)
    w = control.Watcher(path)
    assert w.poll(now=100.0) == control.Control(True, 3)
