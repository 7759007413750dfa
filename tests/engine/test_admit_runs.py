"""Admission runs (Scheduler._admit_run / admit_run: a wave of heads asked as one vectorised
question, placed by one PagedSpace.admit_many) give exactly the one-by-one loop's results.
Stepping uses them too, so the other equivalence tests cannot see a wrong run: here the
same stream is run with runs off (RUN_AFTER past any wave) and on (after 1 or 2 heads),
both stepping and jumping, and compared at sample steps and at the end (block maps, free
queue, running order, waiting queue, summaries, events)."""
from __future__ import annotations

from itertools import product
from unittest import mock

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from kvviz.core.config import CacheConfig, EngineConfig, LaneSpec, WorkloadConfig
from kvviz.core.workload import Workload, generate
from kvviz.engine import Simulation, scheduler
from tests.engine.test_span_equivalence import (
    SETTINGS,
    _maps_equal,
    _pool_state,
    _summaries,
    engines,
    workloads,
)

LANES = ["paged:1", "paged:7", "paged:16", "paged:16:prefix", "contiguous:first-fit:max"]
OFF = 1 << 40


def _states(w: Workload, lanes: list[str], cache: CacheConfig, engine: EngineConfig,
            samples: list[int], run_after: int, advance: str) -> tuple[list, Simulation]:
    specs = [LaneSpec.parse(x) for x in lanes]
    out = []
    with mock.patch.object(scheduler, "RUN_AFTER", run_after):
        sim = Simulation(w, specs, cache, engine, advance=advance)
        for s in [*sorted(samples), 30_000]:
            sim.run(max_steps=s)
            out.append([(x.step_no, x.snapshot(), _pool_state(x), list(x.sched.running),
                         list(x.sched.front), x.sched.next_new) for x in sim.lanes])
    return out, sim


def assert_runs_same(w: Workload, lanes: list[str], cache: CacheConfig, engine: EngineConfig,
                     samples: list[int]) -> Simulation:
    ref, base = _states(w, lanes, cache, engine, samples, OFF, "step")
    for run_after, advance in ((1, "step"), (2, "jump")):
        got, sim = _states(w, lanes, cache, engine, samples, run_after, advance)
        for at, (a, b) in enumerate(zip(ref, got)):
            for x, y in zip(a, b):
                assert x[0] == y[0] and _maps_equal(x[1], y[1]), (at, run_after)
                assert x[2:] == y[2:], (at, run_after)
        assert _summaries(sim) == _summaries(base), run_after
        assert sim.events.events == base.events.events, run_after
    return base


@SETTINGS
@given(st.data(), st.lists(st.sampled_from(LANES), min_size=1, max_size=3))
def test_admission_runs_admit_what_the_loop_admits(data, lanes):
    w = data.draw(workloads())
    engine = data.draw(engines)
    cap = data.draw(st.sampled_from([64, 300, 1024, 4096, 65536]))
    samples = data.draw(st.lists(st.integers(1, 300), max_size=3))
    assert_runs_same(w, lanes, CacheConfig(capacity_tokens=cap), engine, samples)


def test_waves_at_once_with_preemptions_rejections_and_every_limit():
    """200 at once: the first waves are runs, preempted requests come back at the
    front ahead of new ones; a too-big head mid-wave (rejected), max_num_seqs, the token
    budget (a chunk ends a run), chunked prefill off, the watermark (waived while nothing
    runs)."""
    w = generate(WorkloadConfig("sharegpt-like", num_requests=200, seed=3, max_seq_len=1024))
    prompt = w.prompt.copy()
    prompt[[5, 40, 41, 150]] = 2000  # too big for the 2,048-slot cache with their output
    output = w.output.copy()
    output[[5, 40, 41, 150]] = 100
    w = Workload(w.arrival_s, prompt, output, w.prefix_group)
    lanes = ["paged:16", "paged:1", "paged:5"]
    for cap, seqs, budget, chunked, wm in ((2048, 10**6, 10**9, True, 0.0),
                                           (8192, 100, 10**9, True, 0.01),
                                           (8192, 10**6, 3000, True, 0.0),
                                           (8192, 10**6, 4096, False, 0.05),
                                           (10**6, 10**6, 10**9, True, 0.3)):
        engine = EngineConfig(max_num_seqs=seqs, max_batched_tokens=budget,
                              enable_chunked_prefill=chunked, watermark=wm, max_seq_len=4096)
        sim = assert_runs_same(w, lanes, CacheConfig(capacity_tokens=cap), engine, [1, 2, 9])
        assert all(x.done + x.rejected == len(w) for x in sim.lanes)
        if cap == 2048:
            assert all(x.rejected >= 1 and x.preemptions > 10 for x in sim.lanes)


def _trace(prompt, output, arrival=None) -> Workload:
    n = len(prompt)
    return Workload(np.zeros(n) if arrival is None else np.asarray(arrival, np.float64),
                    np.asarray(prompt, np.int64), np.asarray(output, np.int64),
                    np.full(n, -1, np.int64))


def test_runs_stop_exactly_at_each_limit():
    """Waves whose limits bind at the edge: the budget one token short of a whole prompt
    (a chunk), exactly spent; max_num_seqs reached; the watermark refusing the second head
    of a wave (waived for the first only: nothing ran); a too-big head whose prompt alone
    fits the free blocks (rejected, not admitted)."""
    cases = [  # prompts, outputs, capacity, engine
        ([10] * 9 + [11, 5, 5], [3] * 12, 4096, EngineConfig(max_batched_tokens=100)),
        ([10] * 10 + [4, 4], [2] * 12, 4096, EngineConfig(max_batched_tokens=100)),
        ([10] * 12, [4] * 12, 4096, EngineConfig(max_num_seqs=5)),
        ([600, 200, 16, 16, 16], [20] * 5, 1024, EngineConfig(watermark=0.25)),
        ([3, 4, 5, 1000, 6, 7], [5, 5, 5, 100, 5, 5], 1024, EngineConfig()),
    ]
    for prompt, output, cap, engine in cases:
        w = _trace(prompt, output)
        sim = assert_runs_same(w, ["paged:16", "paged:1"], CacheConfig(capacity_tokens=cap),
                               engine, [1, 2, 3])
        assert all(x.done + x.rejected == len(w) for x in sim.lanes)



def test_admits_whole_is_verdict_admitting_the_whole_total():
    """Scheduler.admits_whole (the pressure walk asks it per head) answers True exactly when
    verdict, with PagedSpace.memory on the same free blocks, admits the head computing its
    whole total, and equals admit_run's answer for that one head: every combination of
    limits around their edges (budget, max_num_seqs, need vs free with a watermark,
    nothing running, chunked prefill on and off)."""
    for bs, wm, seqs, chunked in product([1, 16], [0.0, 0.05, 0.3], [1, 3, 256], [True, False]):
        sim = Simulation(_trace([1], [1]), [LaneSpec.parse(f"paged:{bs}")],
                         CacheConfig(capacity_tokens=64 * bs),
                         EngineConfig(max_num_seqs=seqs, watermark=wm,
                                      enable_chunked_prefill=chunked))
        sched = sim.lanes[0].sched
        memory = sched.space.memory
        for total, running, budget, free in product([1, 15, 16, 17, 40], [0, 1, 2, 3, 256],
                                                    [-1, 0, 15, 16, 17, 40], [0, 1, 2, 3, 5]):
            need = -(-total // bs)
            adm, n = sched.verdict(total, 0, running, budget,
                                   lambda e, m=memory, need=need, free=free: m(need, free, e))
            whole = adm is None and n == total
            assert sched.admits_whole(total, running, budget, need, free) == whole
            assert (sched.admit_run(np.array([total]), running, budget, free) == 1) == whole
