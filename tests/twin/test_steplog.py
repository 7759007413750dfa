"""The baseline's compiled step log (kvviz/engine/rule/steplog.py, kvviz/twin/logged.py)
against the same record read from Python after each stepped step (tests/twin/stepped.py):
equal list for list, table for table, on streams that admit, preempt, chunk prefills, hit
cached prefixes and idle between arrivals."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from kvviz.engine import Simulation
from kvviz.engine.rule import steplog
from kvviz.twin.runner import run_config
from kvviz.twin.selfcheck import RecordSpec, StepRecord, compare
from kvviz.twin.settings import NodeSettings
from tests.twin.stepped import Recorder, step_through
from tests.twin.streams import stream

ROOT = Path(__file__).resolve().parents[2]
# (requests, rate, prefix share, settings): what each case makes the rule do
CASES = {
    "preempting": (120, 40.0, 0.0, NodeSettings(16, 257, enable_prefix_caching=False)),
    "prefix hits, preempting": (120, 40.0, 0.6, NodeSettings(16, 257)),
    "chunked prefill": (60, 20.0, 0.3, NodeSettings(16, 1025, 8, 64, True, 0.01, True)),
    "idle spans": (60, 0.3, 0.5, NodeSettings(32, 513)),
}


def stepped(s, settings: NodeSettings, spec: RecordSpec) -> StepRecord:
    sim = Simulation(s.workload, [settings.lane()], settings.cache(s.model),
                     settings.engine(s.step_ms, s.max_seq_len), advance="step")
    rec = Recorder(spec)
    step_through(sim, rec)
    return rec.record()


def assert_same(a: StepRecord, b: StepRecord) -> None:
    np.testing.assert_array_equal(a.busy, b.busy)
    assert a.lists.keys() == b.lists.keys()
    for k in a.lists:
        for x, y in zip(a.lists[k], b.lists[k]):
            np.testing.assert_array_equal(x, y, err_msg=k)
    assert a.tables.keys() == b.tables.keys()
    for s in a.tables:
        for f in ("seqs", "lens", "blocks"):
            np.testing.assert_array_equal(getattr(a.tables[s], f), getattr(b.tables[s], f))
    assert compare(a, b)["equal"] and compare(b, a)["equal"]


def specs(s, record: StepRecord) -> list[RecordSpec]:
    """Every table and list with the replay's ids; the node's ids (a permutation), a few
    sampled steps (one never busy) and no scheduled lists."""
    n = len(s.workload)
    names = np.random.default_rng(0).permutation(n).astype(np.int64) + 1000
    busy = [int(x) for a, b in record.busy.tolist() for x in range(a, b + 1)]
    return [RecordSpec(), RecordSpec(names, frozenset(busy[::7] + [10**9]), False)]


@pytest.fixture
def small_log(monkeypatch):
    """The step log starts at one entry per array, so every call grows it (LOG_FULL)."""
    monkeypatch.setattr(steplog, "empty", lambda: steplog.StepLog(
        *[np.zeros((1, 4) if f == "counts" else (steplog.L_NUM if f == "lc" else 1), np.int64)
          for f in steplog.StepLog._fields]))


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_compiled_step_log_equals_the_stepped_record(case, small_log):
    requests, rate, prefix, settings = CASES[case]
    s = stream(requests, rate, prefix=prefix)
    full = run_config(s, settings, record=True)
    assert full.record.steps > 0 and full.record.tables
    if case.endswith("preempting"):
        assert full.record.preemptions > 0
    for spec in specs(s, full.record):
        assert_same(run_config(s, settings, spec).record, stepped(s, settings, spec))


def test_the_logged_run_ends_as_the_plain_run_does():
    """The record's run leaves the lane, its events and its occupancy log as a run without
    it does."""
    requests, rate, prefix, settings = CASES["prefix hits, preempting"]
    s = stream(requests, rate, prefix=prefix)
    a, b = run_config(s, settings), run_config(s, settings, record=True)
    assert {k: v for k, v in a.summary.items() if k != "wall_seconds"} == {
        k: v for k, v in b.summary.items() if k != "wall_seconds"}
    for f in ("queue_steps", "curve_step", "curve_blocks", "curve_preempted"):
        np.testing.assert_array_equal(getattr(a, f), getattr(b, f))
    assert (a.blocks_peak, a.blocks_mean) == (b.blocks_peak, b.blocks_mean)


def test_the_interpreted_step_log_equals_the_stepped_record():
    """The same source run as plain Python (NUMBA_DISABLE_JIT=1) logs the same record."""
    code = ("from tests.twin.test_steplog import *; s = stream(40, 40.0, prefix=0.5); "
            "st = NodeSettings(16, 129); "
            "assert_same(run_config(s, st, True).record, stepped(s, st, RecordSpec())); "
            "print('same')")
    env = {**os.environ, "NUMBA_DISABLE_JIT": "1", "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "same", out.stderr[-2000:]
