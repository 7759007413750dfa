"""The lean lane gives exactly the step engine's results: each lane's summary (but wall
time) and its events in the same order with the same steps, over random workloads, lanes
and limits, and on fixed presets."""
from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from kvviz.config import CacheConfig, EngineConfig, LaneSpec, WorkloadConfig
from kvviz.engine import Simulation
from kvviz.engine.lean import lane_can_lean, run_lean
from kvviz.workload import Workload, generate
from tests.core.test_jump_equivalence import (
    CONTIGUOUS,
    PAGED,
    PREFIX,
    SETTINGS,
    STEP_CAP,
    _summaries,
    engines,
    workloads,
)


def assert_lean_same(w: Workload, lanes: list[str], cache: CacheConfig,
                     engine: EngineConfig) -> list[bool]:
    """Every lane the lean model covers, run lean to the end (or STEP_CAP), against the step
    engine; returns which lanes ran lean."""
    specs = [LaneSpec.parse(x) for x in lanes]
    step = Simulation(w, specs, cache, engine, advance="step")
    step.run(max_steps=STEP_CAP)
    lean = Simulation(w, specs, cache, engine, advance="jump")
    ref = step.events.since(0)[0]
    ran = []
    for pos, (a, b) in enumerate(zip(step.lanes, lean.lanes)):
        ran.append(lane_can_lean(b))
        if not ran[-1]:
            continue
        cols = run_lean(b, lean._arrival, engine.step_ms, STEP_CAP)
        mine = ref["lane"] == pos
        for f, col in cols.cols.items():
            assert col.tolist() == ref[f][mine].tolist(), (a.name, f)
        sa = a.summary()
        assert b.summary() == sa, a.name
    return ran


def _run(data, lanes: list[str]) -> list[bool]:
    w = data.draw(workloads())
    engine = data.draw(engines)
    if data.draw(st.booleans()):  # contiguous reservations shorter than some requests
        engine = EngineConfig(max_num_seqs=engine.max_num_seqs,
                              max_batched_tokens=engine.max_batched_tokens,
                              watermark=engine.watermark, step_ms=engine.step_ms,
                              max_seq_len=data.draw(st.sampled_from([16, 64, 200])))
    cap = data.draw(st.sampled_from([64, 128, 300, 1024, 4096, 65536]))
    return assert_lean_same(w, lanes, CacheConfig(capacity_tokens=cap), engine)


@SETTINGS
@given(st.data(), st.lists(st.sampled_from(CONTIGUOUS), min_size=1, max_size=2))
def test_contiguous_lanes_run_lean_exactly(data, lanes):
    _run(data, lanes)


@SETTINGS
@given(st.data(), st.lists(st.sampled_from(PAGED + PREFIX), min_size=1, max_size=2))
def test_paged_lanes_run_lean_exactly(data, lanes):
    _run(data, lanes)


def test_lean_covers_the_four_lane_preset():
    w = generate(WorkloadConfig("sharegpt-like", num_requests=400, rate=5.0, seed=3))
    lanes = ["contiguous:first-fit:max", "contiguous:buddy:pow2", "paged:16",
             "paged:16:prefix"]
    ran = assert_lean_same(w, lanes, CacheConfig(capacity_tokens=65536),
                           EngineConfig(max_num_seqs=256, max_batched_tokens=8192))
    assert all(ran)


def test_lean_preempts_exactly():
    w = generate(WorkloadConfig("sharegpt-like", num_requests=200, seed=1, max_seq_len=512))
    engine = EngineConfig(max_num_seqs=100000, max_batched_tokens=10**9, max_seq_len=512)
    for cap in (2048, 4096):
        assert all(assert_lean_same(w, ["paged:16", "paged:1", "contiguous:best-fit:exact"],
                                    CacheConfig(capacity_tokens=cap), engine))


def test_simulation_run_to_the_end_is_lean_and_equal():
    """Simulation.run() without max_steps takes the lean lane and merges its events in the
    step engine's order."""
    w = generate(WorkloadConfig("alpaca-like", num_requests=150, rate=40.0, seed=5))
    specs = [LaneSpec.parse(x) for x in ("paged:16", "contiguous:first-fit:exact")]
    cache, engine = CacheConfig(capacity_tokens=4096), EngineConfig(watermark=0.01)
    step = Simulation(w, specs, cache, engine, advance="step")
    step.run()
    jump = Simulation(w, specs, cache, engine, advance="jump")
    assert all(lane_can_lean(x) for x in jump.lanes)
    jump.run()
    assert not any(lane_can_lean(x) for x in jump.lanes)  # spent: a second run is not lean
    assert _summaries(jump) == _summaries(step)
    assert jump.events.events == step.events.events
    assert jump.step_no == step.step_no


def test_a_lane_whose_reservation_can_grow_is_not_lean():
    w = generate(WorkloadConfig("uniform", num_requests=5, rate=math.inf, max_seq_len=600))
    sim = Simulation(w, [LaneSpec.parse("contiguous:first-fit:max")],
                     CacheConfig(capacity_tokens=65536), EngineConfig(max_seq_len=16))
    assert not lane_can_lean(sim.lanes[0])
