"""Live's averages: exact shares over a span of samples from the cumulative share counters."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from collectors.launch import build
from collectors.writer_client import SampleWriter, StoreSpec
from kvviz.commands.cli import build_parser
from kvviz.core.config import CacheConfig, LaneSpec, WorkloadConfig
from kvviz.core.workload import generate
from kvviz.engine import Simulation
from kvviz.settings.flags import settings_of
from kvviz.store.reader import RunReader
from kvviz.viz import pressure as vp

SHARES = ("used", "reserved", "internal", "free")


def _sim(capacity: int) -> Simulation:
    w = generate(WorkloadConfig("sharegpt-like", num_requests=150, rate=30.0, seed=4))
    return Simulation(w, [LaneSpec.parse("paged:16")], CacheConfig(capacity_tokens=capacity))


def _row(sim: Simulation, t: float) -> dict:
    ln = sim.lanes[0]
    return {"t": t, "lane": ln.name, "capacity_tokens": ln.capacity, **ln.shares.counters()}


def test_the_span_from_the_first_step_equals_the_lane_summary():
    sim = _sim(8192)
    rows = [_row(sim, 0.0)]
    sim.run()
    rows.append(_row(sim, 1.0))
    span = vp.span_shares(pd.DataFrame(rows), "paged:16")
    (s,) = sim.summaries()
    assert (span.steps, span.pressure_steps) == (s["steps"], s["pressure_steps"]) and s[
        "pressure_steps"] > 0
    assert [span.all_steps[k] for k in SHARES] == pytest.approx(
        [s[f"{k}_share"] for k in SHARES])
    assert [span.pressure[k] for k in SHARES] == pytest.approx(
        [s["pressure_step_shares"][k] for k in SHARES])


def test_a_middle_span_averages_only_the_steps_between_its_samples():
    sim = _sim(8192)
    for _ in range(200):
        sim.step()
    a = _row(sim, 1.0)
    used = 0
    for _ in range(300):
        sim.step()
        used += sim.lanes[0].alloc.usage().used_tokens
    span = vp.span_shares(pd.DataFrame([a, _row(sim, 2.0)]), "paged:16")
    assert span.steps == 300
    assert span.all_steps["used"] == pytest.approx(used / (300 * 8192))


def test_a_lane_never_under_pressure_says_so_and_old_recordings_give_none():
    sim = _sim(1 << 20)
    sim.run()
    span = vp.span_shares(pd.DataFrame([_row(sim, 1.0)]), "paged:16")
    assert span.pressure is None and span.pressure_steps == 0
    assert sum(span.all_steps.values()) == pytest.approx(1.0)
    assert vp.NEVER in vp.span_text(span)
    old = pd.DataFrame([{"t": 1.0, "lane": "paged:16", "capacity_tokens": 100}])
    assert vp.span_shares(old, "paged:16") is None


def test_the_collector_records_the_counters_and_they_read_back(tmp_path: Path):
    out = tmp_path / "run.db"
    col = build(settings_of(build_parser("collect").parse_args(
        ["collect", "--mode", "sim", "--quiet", "--out", str(out), "--rate", "inf",
         "--requests", "200", "--capacity-tokens", "8192"])))
    sink = SampleWriter(StoreSpec(out, col.meta()), [], mode="inline")
    for i in range(4):
        for _ in range(40):
            col.sim.step(time_s=0.01 * i)
        sink.put(col._batch(0.01 * i + 0.005))
    sink.close("finished")
    samples = RunReader(out).samples()
    for ln in col.sim.lanes:
        last = samples[samples["lane"] == ln.name].iloc[-1]
        assert {k: int(last[k]) for k in vp.COLUMNS} == ln.shares.counters()
        span = vp.span_shares(samples, ln.name)
        assert span is not None and span.steps == 120  # between the first and last sample
        assert f"{span.steps} steps" in vp.span_text(span)
