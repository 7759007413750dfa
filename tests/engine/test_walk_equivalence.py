"""Pressure windows (kvviz/engine/walk.py) give exactly stepping's results: paged lanes
without prefix caching under memory pressure, where nearly every step preempts, refuses the
head, admits or finishes (assert_same compares block maps, free queues, running order,
summaries and events with advance="step")."""
from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from kvviz.core.config import CacheConfig, EngineConfig, LaneSpec, WorkloadConfig
from kvviz.core.workload import Workload, generate
from kvviz.engine import Simulation
from tests.engine.test_span_equivalence import (
    SETTINGS,
    _count_lane_steps,
    assert_same,
    engines,
    workloads,
)

PAGED = [f"paged:{b}" for b in (1, 2, 7, 16, 64)]


def _trace(arrival, prompt, output) -> Workload:
    n = len(arrival)
    return Workload(np.asarray(arrival, np.float64), np.asarray(prompt, np.int64),
                    np.asarray(output, np.int64), np.full(n, -1, np.int64))


@SETTINGS
@given(st.data(), st.lists(st.sampled_from(PAGED), min_size=1, max_size=3))
def test_paged_lanes_under_pressure_walk_exactly(data, lanes):
    w = data.draw(workloads())
    engine = data.draw(engines)
    cap = data.draw(st.sampled_from([64, 100, 128, 192, 300, 1024]))  # small: preemptions
    samples = data.draw(st.lists(st.integers(1, 3000), max_size=4))
    assert_same(w, lanes, CacheConfig(capacity_tokens=cap), engine, samples)


def test_a_stream_at_once_walks_its_preemptions_exactly(monkeypatch):
    """Many requests at once into a small cache (bench_engine.py's vLLM stream, smaller):
    preemptions on most steps, heads refused for CAPACITY and admitted as blocks free;
    stopped at sample steps inside walks. The walk takes nearly every step."""
    w = generate(WorkloadConfig("sharegpt-like", num_requests=300, seed=0, max_seq_len=1024))
    lanes = ["paged:16", "paged:1", "paged:5", "paged:256"]
    for wm in (0.0, 0.01):
        jump = assert_same(w, lanes, CacheConfig(capacity_tokens=8192),
                           EngineConfig(max_seq_len=1024, max_batched_tokens=2048,
                                        watermark=wm), [5, 77, 400, 401])
        assert all(x.preemptions > 100 for x in jump.lanes)
    calls = _count_lane_steps(monkeypatch)
    sim = Simulation(w, [LaneSpec.parse("paged:16")], CacheConfig(capacity_tokens=8192),
                     EngineConfig(max_seq_len=1024, max_batched_tokens=2048))
    sim.run()
    assert sim.lanes[0].preemptions > 100
    assert calls["n"] < sim.step_no / 20


def test_walks_stop_where_a_step_cannot_be_taken_whole():
    """A head too big for the cache (rejected), a prompt the budget admits in chunks,
    max_num_seqs (POLICY), chunked prefill off, an empty queue with arrivals later (idle
    jumps), requests finishing at their admission (output 1)."""
    w = _trace([0.0] * 6 + [0.02, 0.05, 0.05, 2.0, 2.0, 2.1],
               [30, 20, 33, 400, 17, 64, 15, 40, 8, 90, 3, 70],
               [40, 25, 33, 20, 1, 5, 60, 9, 1, 7, 25, 4])
    lanes = ["paged:16", "paged:4", "paged:1"]
    for cap in (128, 192, 256):
        for seqs, budget, chunked in ((256, 8192, True), (3, 8192, True), (256, 50, True),
                                      (4, 512, False)):
            engine = EngineConfig(max_num_seqs=seqs, max_batched_tokens=budget,
                                  enable_chunked_prefill=chunked, max_seq_len=512)
            jump = assert_same(w, lanes, CacheConfig(capacity_tokens=cap), engine, [3, 9])
            assert all(x.rejected >= 1 for x in jump.lanes)


def test_short_walks_chain_exactly(monkeypatch):
    """Walks cut short by their step and op limits: each starts where the last ended."""
    from kvviz.engine import walk
    monkeypatch.setattr(walk, "LIMIT", 7)
    monkeypatch.setattr(walk, "MAX_OPS", 40)
    w = generate(WorkloadConfig("sharegpt-like", num_requests=150, seed=2, max_seq_len=512))
    jump = assert_same(w, ["paged:16", "paged:3"], CacheConfig(capacity_tokens=4096),
                       EngineConfig(max_seq_len=512), [9, 100])
    assert all(x.preemptions > 20 for x in jump.lanes)


def test_a_head_refused_for_capacity_is_answered_as_asked():
    """The walk does not ask again a head it refused for CAPACITY while the free blocks stay
    below its need: a big head waits while finishes free a few blocks at a time (its need
    reached exactly, with and without a watermark that turns the answer to POLICY first),
    preempted requests take the head's place and give it back."""
    n = 40
    prompt = [40, 24, 33, 17, 60] * 6 + [180, 16, 16, 15, 31, 47, 9, 64, 23, 18]
    output = [(7 * i) % 23 + 2 for i in range(n)]
    w = _trace([0.0] * 30 + [0.0, 0.0, 0.04, 0.04, 0.06, 0.5, 0.5, 0.5, 0.9, 0.9],
               prompt, output)
    for cap, wm in ((256, 0.0), (320, 0.0), (320, 0.1), (512, 0.05)):
        engine = EngineConfig(max_seq_len=256, watermark=wm)
        jump = assert_same(w, ["paged:16", "paged:8", "paged:1"], CacheConfig(capacity_tokens=cap),
                           engine, [4, 30, 31, 90])
        assert all(x.failures["CAPACITY"] >= 1 for x in jump.lanes)


def test_many_requests_finish_and_join_in_one_step():
    """Requests at once with a few output lengths: dozens finish in the same step (their
    blocks freed as one run of ops), dozens are admitted in the next, under preemptions."""
    n = 240
    rng = np.random.default_rng(5)
    w = _trace([0.0] * n, rng.integers(1, 90, n), rng.choice([3, 8, 17, 40], n))
    lanes = ["paged:16", "paged:4", "paged:1"]
    for cap, budget in ((2048, 10**9), (3000, 10**9), (1500, 200)):
        engine = EngineConfig(max_seq_len=256, max_batched_tokens=budget)
        jump = assert_same(w, lanes, CacheConfig(capacity_tokens=cap), engine, [6, 21, 22])
        assert all(x.preemptions > 5 for x in jump.lanes)
