"""Sparse arrivals: run() jumps over idle steps with the same results as stepping them."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvviz.core.config import CacheConfig, EngineConfig, LaneSpec, WorkloadConfig
from kvviz.core.errors import KvvizError
from kvviz.core.workload import Workload, generate
from kvviz.engine import Simulation
from tests.examples import examples

LANES = [LaneSpec.parse(t) for t in (
    "paged:16", "paged:16:prefix", "contiguous:first-fit:max", "contiguous:buddy:exact")]


def sim(w: Workload, tokens: int = 8192) -> Simulation:
    return Simulation(w, LANES, CacheConfig(capacity_tokens=tokens),
                      EngineConfig(max_seq_len=1024))


def trace(arrivals, prompt=100, output=20) -> Workload:
    n = len(arrivals)
    return Workload(np.asarray(arrivals, np.float64), np.full(n, prompt, np.int64),
                    np.full(n, output, np.int64), np.full(n, -1, np.int64))


def stepped(s: Simulation, max_steps: int | None = None) -> list[dict]:
    """The reference: every step taken one by one (step() never jumps)."""
    while not s.finished and (max_steps is None or s.step_no < max_steps):
        s.step()
    return s.summaries()


def result(s: Simulation, summaries: list[dict]) -> tuple:
    return ([{k: v for k, v in x.items() if k != "wall_seconds"} for x in summaries],
            list(s.events.events), s.step_no)


@pytest.mark.parametrize("rate", [2.0, 20.0])
def test_jumping_gives_the_summaries_events_and_steps_of_stepping(rate):
    w = generate(WorkloadConfig("sharegpt-like", num_requests=40, rate=rate, max_seq_len=1024,
                                seed=3, prefix_share=0.5, prefix_tokens=64))
    a, b = sim(w), sim(w)
    assert result(a, a.run()) == result(b, stepped(b))


@settings(max_examples=examples(30), deadline=None)
@given(gaps=st.lists(st.floats(0.0, 5.0), min_size=1, max_size=8),
       max_steps=st.one_of(st.none(), st.integers(1, 900)), tokens=st.sampled_from([512, 8192]))
def test_jumping_equals_stepping_for_any_gaps_and_step_limit(gaps, max_steps, tokens):
    w = trace(np.cumsum(gaps))
    a, b = sim(w, tokens), sim(w, tokens)
    assert result(a, a.run(max_steps)) == result(b, stepped(b, max_steps))


def test_an_arrival_a_billion_seconds_away_is_reached_by_a_jump():
    s = sim(trace([0.0, 1e9]))
    out = s.run(max_steps=10**12)
    assert s.finished and [x["finished"] for x in out] == [2] * len(LANES)
    admitted = [e.time_s for e in s.events.events if e.kind == "admitted" and e.seq_id == 1]
    assert admitted and min(admitted) >= 1e9


def test_a_step_limit_stops_a_jump_at_the_limit():
    s = sim(trace([0.0, 1e9]))
    s.run(max_steps=5000)
    assert s.step_no == 5000 and not s.finished


def test_an_arrival_beyond_the_step_counter_is_one_clear_error():
    w = generate(WorkloadConfig("sharegpt-like", num_requests=3, rate=1e-300, seed=1))
    with pytest.raises(KvvizError, match="engine steps"):
        sim(w).run()
