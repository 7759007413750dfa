"""Windows while requests wait for a seat (kvviz/engine/seats.py, window.py): a paged lane
whose head waits behind max_num_seqs takes many steps at once, and gives exactly stepping's
results (block maps, free queue, running order at sampled steps; events in order, with the
POLICY refusals' fields; summaries)."""
from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kvviz.core.config import CacheConfig, EngineConfig, LaneSpec, WorkloadConfig
from kvviz.core.workload import generate
from kvviz.engine import Simulation
from kvviz.engine.seats import seat_steps

from .test_span_equivalence import SETTINGS, _count_lane_steps, _trace, assert_same


@SETTINGS
@given(st.data(), st.lists(st.sampled_from(["paged:1", "paged:16", "paged:64"]), min_size=1,
                           max_size=2))
def test_paged_lanes_waiting_for_seats_give_the_step_engines_results(data, lanes):
    w = generate(WorkloadConfig(
        data.draw(st.sampled_from(["sharegpt-like", "alpaca-like", "uniform"])),
        num_requests=data.draw(st.integers(5, 150)),
        rate=data.draw(st.sampled_from([math.inf, 20.0, 200.0])), max_seq_len=512,
        seed=data.draw(st.integers(0, 99))))
    engine = EngineConfig(max_num_seqs=data.draw(st.sampled_from([1, 2, 3, 7, 16])),
                          max_batched_tokens=data.draw(st.sampled_from([100, 8192, 10**9])),
                          watermark=data.draw(st.sampled_from([0.0, 0.01])), max_seq_len=512)
    cap = data.draw(st.sampled_from([1024, 4096, 65536]))
    samples = data.draw(st.lists(st.integers(1, 3000), max_size=3))
    assert_same(w, lanes, CacheConfig(capacity_tokens=cap), engine, samples)


@settings(SETTINGS, max_examples=20)
@given(st.data())
def test_prefix_lanes_waiting_for_seats_give_the_step_engines_results(data):
    """A request whose prefix may hit, refused for a seat inside a window: its refusal's
    need is net of its hits, which only the step looks up (the window ends before it)."""
    w = generate(WorkloadConfig(
        "sharegpt-like", num_requests=data.draw(st.integers(10, 60)),
        rate=data.draw(st.sampled_from([math.inf, 40.0, 200.0])), max_seq_len=1024,
        prefix_share=data.draw(st.sampled_from([0.5, 0.9])), seed=data.draw(st.integers(0, 99))))
    engine = EngineConfig(max_num_seqs=data.draw(st.sampled_from([1, 2, 4, 7])),
                          watermark=data.draw(st.sampled_from([0.0, 0.2])), max_seq_len=1024)
    lanes = data.draw(st.sampled_from([["paged:16:prefix"], ["paged:8:prefix", "paged:16"]]))
    cap = data.draw(st.sampled_from([8192, 65536]))
    assert_same(w, lanes, CacheConfig(capacity_tokens=cap), engine, [])


def test_a_seat_refusal_with_prefix_hits_names_the_need_stepping_names():
    w = generate(WorkloadConfig("sharegpt-like", num_requests=60, rate=40.0, seed=0,
                                prefix_share=0.5, max_seq_len=1024))
    jump = assert_same(w, ["paged:16:prefix"], CacheConfig(capacity_tokens=8192),
                       EngineConfig(max_num_seqs=4, watermark=0.2, max_seq_len=1024), [])
    fail = [e for e in jump.events.events if e.kind == "admit_failed" and e.seq_id == 5]
    assert fail and fail[0].need_tokens < 16 * -(-int(w.prompt[5]) // 16)  # hits count


def test_seat_refusals_are_logged_as_stepping_logs_them():
    """Heads that wait at the start, arrive into a full batch, or wait behind a head that
    waits; memory that runs short of a waiting head mid-window (its refusal turns CAPACITY)."""
    w = _trace([0.0] * 6 + [0.3, 0.31, 2.0, 2.0],
               [40, 20, 60, 33, 16, 90, 17, 64, 5, 48], [30, 5, 50, 12, 40, 8, 60, 3, 90, 20])
    for cap in (4096, 400, 260):
        for seqs in (1, 2, 3):
            jump = assert_same(w, ["paged:16", "paged:8"], CacheConfig(capacity_tokens=cap),
                               EngineConfig(max_num_seqs=seqs, max_seq_len=512), [5, 40])
            fails = [e for e in jump.events.events if e.kind == "admit_failed"]
            assert fails and all(e.need_tokens > 0 for e in fails)


def test_seat_windows_skip_the_steps_between(monkeypatch):
    """Not an equivalence check: 2,000 requests at once behind 16 seats take few Lane.step
    calls, where each finish used to step."""
    calls = _count_lane_steps(monkeypatch)
    w = generate(WorkloadConfig("sharegpt-like", num_requests=2000, rate=math.inf, seed=1))
    sim = Simulation(w, [LaneSpec.parse("paged:16")], CacheConfig(capacity_tokens=1 << 20),
                     EngineConfig(max_num_seqs=16))
    sim.run()
    s = sim.lanes[0].summary()
    assert s["finished"] == 2000 and s["admit_failures"]["policy"] > 1000
    assert calls["n"] < sim.step_no / 20


def test_seat_steps_wait_for_the_earliest_finish():
    """Two seats, both taken (finishing at steps 5 and 9): the first waiting request sits at
    step 6, the next at 10 (the one seated at 6 runs to 6 + 20); a late arrival at 40 is
    seated on arrival (both seats are free by then)."""
    admit, asked = seat_steps(np.array([1, 1, 40]), np.array([9, 5]), np.array([20, 3, 0]),
                              2, 0)
    assert admit.tolist() == [6, 10, 40] and asked.tolist() == [1, 6, 40]
