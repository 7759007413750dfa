"""Time-averaged shares: over all steps, and over memory-pressure steps only.

A memory-pressure step: the head-of-line request was refused for memory (CAPACITY or
FRAGMENTATION) or a sequence was preempted. Waiting for the batch limit or the prefill token
budget with memory free is not memory pressure.
"""
from __future__ import annotations

import numpy as np
import pytest

from kvviz.core.admission import Reason
from kvviz.core.config import CacheConfig, EngineConfig, LaneSpec, WorkloadConfig
from kvviz.core.workload import generate
from kvviz.engine import Simulation

SHARES = ("used", "reserved", "internal", "free")
FLAT = tuple(f"{k}_share" for k in SHARES)


def _sim(lanes, tokens, n=80, rate=float("inf"), **eng) -> Simulation:
    w = generate(WorkloadConfig("sharegpt-like", num_requests=n, rate=rate, max_seq_len=1024,
                                seed=3))
    return Simulation(w, [LaneSpec.parse(x) for x in lanes],
                      CacheConfig(capacity_tokens=tokens),
                      EngineConfig(max_seq_len=1024, **eng))


def test_waiting_only_for_the_batch_limit_is_not_memory_pressure():
    s = _sim(["paged:16", "contiguous:first-fit:max"], 1 << 20, max_num_seqs=2)
    for x in s.run(max_steps=100_000):
        assert x["admit_failures"]["policy"] > 0  # requests did wait, for the batch limit
        assert x["pressure_steps"] == 0
        assert x["pressure_step_shares"] is None
        assert sum(x[k] for k in FLAT) == pytest.approx(1.0)  # top level: over all steps


def test_top_level_shares_are_the_mean_of_each_step_usage():
    s = _sim(["paged:16", "contiguous:buddy:pow2"], 8192, rate=30.0)
    sums = {lane.name: np.zeros(2) for lane in s.lanes}
    steps = dict.fromkeys(sums, 0)
    while not s.finished:
        live = [lane for lane in s.lanes if not lane.finished]
        s.step()
        for lane in live:
            u = lane.alloc.usage()
            sums[lane.name] += (u.used_tokens, u.free_tokens)
            steps[lane.name] += 1
    for x, lane in zip(s.summaries(), s.lanes):
        every = {k: x[f"{k}_share"] for k in SHARES}
        assert steps[lane.name] == x["steps"]
        want = sums[lane.name] / (x["steps"] * lane.capacity)
        assert (every["used"], every["free"]) == pytest.approx(tuple(want))


def test_pressure_steps_are_the_steps_with_a_memory_refusal_or_a_preemption():
    s = _sim(["paged:16", "contiguous:first-fit:exact", "contiguous:buddy:max"], 6144,
             rate=40.0)
    s.advance = "step"  # the spy reads every step's plan
    refused: dict[str, set[int]] = {lane.name: set() for lane in s.lanes}
    for lane in s.lanes:
        def spy(lane):
            r = lane.last_plan.refused
            if r is not None and r[1].reason is not Reason.POLICY:
                refused[lane.name].add(lane.step_no)

        lane.after_schedule = spy
    out = s.run(max_steps=100_000)
    for x in out:
        pre = {e.step for e in s.events.events
               if e.lane == x["lane"] and e.kind == "preempted"}
        mem_events = {e.step for e in s.events.events if e.lane == x["lane"]
                      and e.kind == "admit_failed" and e.reason != "POLICY"}
        assert mem_events <= refused[x["lane"]]
        assert x["pressure_steps"] == len(refused[x["lane"]] | pre) > 0


def test_pressure_shares_sum_to_one_and_differ_from_all_steps_when_pressure_is_rare():
    x = _sim(["paged:16"], 8192, n=120, rate=15.0).run(max_steps=100_000)[0]
    assert 0 < x["pressure_steps"] < x["steps"]
    p = x["pressure_step_shares"]
    assert sum(p[k] for k in SHARES) == pytest.approx(1.0)
    assert min(p[k] for k in SHARES) >= 0
    assert p["free"] < x["free_share"]
