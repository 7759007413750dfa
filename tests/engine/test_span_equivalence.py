"""Quiet spans and windows (kvviz/engine/span.py, window.py; advance="jump") give exactly
stepping's results: summaries (but wall time), events in the same order with the same steps,
and at every sampled step the block maps (block ids, owners, fills, contiguous placement),
the free queue and prefix cache in their order, and the running order."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvviz.core.config import CacheConfig, EngineConfig, LaneSpec, WorkloadConfig
from kvviz.core.workload import Workload, generate
from kvviz.engine import Simulation

CONTIGUOUS = [f"contiguous:{p}:{r}" for p in ("first-fit", "best-fit", "buddy")
              for r in ("max", "pow2", "exact")]
PAGED = [f"paged:{b}" for b in (1, 16, 64)]
PREFIX = [f"paged:{b}:prefix" for b in (1, 16, 64)]
STEP_CAP = 30_000  # compare up to this step at most
SETTINGS = settings(max_examples=40, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _maps_equal(a, b) -> bool:
    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
            if x is None or y is None or not np.array_equal(x, y):
                return False
        elif x != y:
            return False
    return True


def _pool_state(lane) -> tuple | None:
    """A paged lane's free queue and prefix cache, in their order: plain free blocks, the
    LRU, every key's blocks (first cached first), parents, evictions, the keys' log."""
    pool = getattr(lane.alloc, "_pool", None)
    if pool is None:
        return None
    return (pool.plain_list(), list(pool._lru), dict(pool._key_of),
            [(k, list(v)) for k, v in pool._block_of.items()], dict(pool.parent_of),
            pool.evictions, pool.content.tolist(), pool.cached.tolist())


def _summaries(sim: Simulation) -> list[dict]:
    out = sim.summaries()
    for s in out:
        s.pop("wall_seconds")
    return out


def assert_same(w: Workload, lanes: list[str], cache: CacheConfig, engine: EngineConfig,
                samples: list[int]) -> Simulation:
    """Run both engines, stopping at each sample step to compare block maps, to the end
    (or STEP_CAP); returns the jumping simulation."""
    specs = [LaneSpec.parse(x) for x in lanes]
    step = Simulation(w, specs, cache, engine, advance="step")
    jump = Simulation(w, specs, cache, engine, advance="jump")
    for s in [*sorted(samples), STEP_CAP]:
        step.run(max_steps=s)
        jump.run(max_steps=s)
        assert jump.step_no == step.step_no
        for a, b in zip(step.lanes, jump.lanes):
            assert a.step_no == b.step_no
            assert _maps_equal(a.snapshot(), b.snapshot()), (s, a.name)
            assert _pool_state(a) == _pool_state(b), (s, a.name)
            assert a.sched.running == b.sched.running, (s, a.name)
    assert _summaries(jump) == _summaries(step)
    assert jump.events.events == step.events.events
    return jump


@st.composite
def workloads(draw) -> Workload:
    kind = draw(st.sampled_from(["poisson", "bursty", "trace"]))
    max_len = draw(st.integers(16, 400))
    if kind == "trace":
        n = draw(st.integers(1, 40))
        gaps = draw(st.lists(st.sampled_from([0.0, 0.001, 0.02, 0.05, 0.3, 1.7]),
                             min_size=n, max_size=n))
        prompt = np.array(draw(st.lists(st.integers(1, max_len - 1), min_size=n, max_size=n)))
        out = np.array(draw(st.lists(st.integers(1, max_len), min_size=n, max_size=n)))
        out = np.maximum(1, np.minimum(out, max_len - prompt))
        return Workload(np.cumsum(gaps), prompt.astype(np.int64), out.astype(np.int64),
                        np.full(n, -1, np.int64))
    rate = draw(st.sampled_from([math.inf, 0.5, 5.0, 40.0, 400.0]))
    share = draw(st.sampled_from([0.0, 0.5]))
    return generate(WorkloadConfig(
        draw(st.sampled_from(["sharegpt-like", "alpaca-like", "uniform", "long-context"])),
        num_requests=draw(st.integers(1, 60)), rate=rate, arrival=kind, max_seq_len=max_len,
        prefix_share=share, prefix_tokens=max(1, max_len // 4), seed=draw(st.integers(0, 99))))


engines = st.builds(
    EngineConfig, max_num_seqs=st.sampled_from([1, 2, 7, 64, 256, 100000]),
    max_batched_tokens=st.sampled_from([1, 100, 8192, 10**9]),
    watermark=st.sampled_from([0.0, 0.01, 0.2]), step_ms=st.sampled_from([20.0, 7.3])
) | st.builds(EngineConfig, max_num_seqs=st.sampled_from([3, 256]),
              max_batched_tokens=st.sampled_from([2048, 10**9]),
              watermark=st.sampled_from([0.0, 0.05]), enable_chunked_prefill=st.just(False))


def _run(data, lanes: list[str]) -> None:
    w = data.draw(workloads())
    engine = data.draw(engines)
    cap = data.draw(st.sampled_from([64, 128, 300, 1024, 4096, 65536]))
    samples = data.draw(st.lists(st.integers(1, 3000), max_size=4))
    assert_same(w, lanes, CacheConfig(capacity_tokens=cap), engine, samples)


@SETTINGS
@given(st.data(), st.lists(st.sampled_from(CONTIGUOUS), min_size=1, max_size=3))
def test_contiguous_lanes_jump_exactly(data, lanes):
    _run(data, lanes)


@SETTINGS
@given(st.data(), st.lists(st.sampled_from(PAGED), min_size=1, max_size=3))
def test_paged_lanes_jump_exactly(data, lanes):
    _run(data, lanes)


@SETTINGS
@given(st.data(), st.lists(st.sampled_from(PREFIX), min_size=1, max_size=2))
def test_prefix_caching_lanes_give_the_step_engines_results(data, lanes):
    _run(data, lanes)


@SETTINGS
@given(st.data(), st.lists(st.sampled_from(CONTIGUOUS + PAGED + PREFIX), min_size=1,
                           max_size=4))
def test_mixed_lanes_give_the_step_engines_results(data, lanes):
    _run(data, lanes)


def test_four_lane_preset_jumps_exactly():
    w = generate(WorkloadConfig("sharegpt-like", num_requests=300, rate=5.0, seed=3))
    lanes = ["contiguous:first-fit:max", "contiguous:buddy:pow2", "paged:16"]
    assert_same(w, lanes, CacheConfig(capacity_tokens=65536), EngineConfig(), [50, 777])


def test_preemption_heavy_preset_jumps_exactly():
    w = generate(WorkloadConfig("sharegpt-like", num_requests=200, seed=1, max_seq_len=512))
    jump = assert_same(w, ["paged:16", "contiguous:first-fit:exact"],
                       CacheConfig(capacity_tokens=2048),
                       EngineConfig(max_num_seqs=100000, max_batched_tokens=10**9,
                                    max_seq_len=512), [10, 400])
    assert jump.lanes[0].preemptions > 0


def test_a_step_that_did_not_ask_the_head_starts_no_span():
    """A prefill chunk used the whole budget, so the step logged nothing about the waiting
    head: the next (decode) step admits it; a span there would have skipped the admission
    (found by hypothesis: 145 steps instead of 87)."""
    w = Workload(np.zeros(3), np.array([192, 108, 135]), np.array([1, 85, 58]),
                 np.full(3, -1, np.int64))
    jump = assert_same(w, ["contiguous:first-fit:pow2", "paged:16"],
                       CacheConfig(capacity_tokens=1024),
                       EngineConfig(max_num_seqs=2, max_batched_tokens=100), [3, 5])
    assert jump.lanes[0].step_no == 87


def _count_lane_steps(monkeypatch) -> dict:
    """Count Lane.step calls from now on (the dict's "n")."""
    from kvviz.engine.lane import Lane
    calls = {"n": 0}
    real = Lane.step

    def counted(self, t):
        calls["n"] += 1
        real(self, t)

    monkeypatch.setattr(Lane, "step", counted)
    return calls


def test_quiet_spans_take_fewer_steps_through_lane_step(monkeypatch):
    """Not an equivalence check: the jumping mode does skip work (a quiet lane jumps)."""
    calls = _count_lane_steps(monkeypatch)
    w = generate(WorkloadConfig("uniform", num_requests=4, rate=math.inf))
    sim = Simulation(w, [LaneSpec.parse("paged:16")], CacheConfig(capacity_tokens=65536))
    sim.run(max_steps=10**9)
    assert calls["n"] < sim.step_no / 4


def _trace(arrival, prompt, output) -> Workload:
    n = len(arrival)
    return Workload(np.asarray(arrival, np.float64), np.asarray(prompt, np.int64),
                    np.asarray(output, np.int64), np.full(n, -1, np.int64))


def test_windows_end_where_the_budget_or_the_batch_limit_binds():
    """Arrivals whose prompts need exactly the budget the decodes leave, one token more,
    one less; and the max_num_seqs-th request. A window (kvviz/engine/window.py) must take
    the whole prompt only where the rule does, and end before a chunk or a wait."""
    w = _trace([0.0, 0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 0.9, 1.1],
               [5, 6, 98, 97, 99, 40, 30, 20, 10], [60, 70, 2, 3, 1, 9, 8, 7, 6])
    lanes = ["paged:16", "paged:1", "contiguous:first-fit:exact", "contiguous:buddy:pow2"]
    for chunked in (True, False):
        for seqs in (3, 4, 256):
            engine = EngineConfig(max_num_seqs=seqs, max_batched_tokens=100,
                                  enable_chunked_prefill=chunked, max_seq_len=100)
            assert_same(w, lanes, CacheConfig(capacity_tokens=4096), engine, [7, 30])
    few = _trace([0.0] * 4 + [0.02, 0.3], [1, 2, 1, 1, 2, 1], [30, 40, 50, 60, 20, 9])
    for budget in (3, 4, 5):  # tiny budgets: arrivals wait for tokens, prompts go in chunks
        assert_same(few, lanes, CacheConfig(capacity_tokens=4096),
                    EngineConfig(max_batched_tokens=budget, max_seq_len=100), [2, 9])


def test_windows_end_where_memory_binds():
    """Admissions that fit the free blocks exactly, with and without the watermark; decodes
    that open the last free block; a contiguous range refused for its placement."""
    w = _trace(np.arange(12) * 0.05, [31, 33, 16, 17, 64, 15, 40, 8, 9, 50, 3, 70],
               [40, 20, 33, 17, 5, 60, 9, 30, 12, 7, 25, 4])
    for cap in (96, 128, 160, 256):
        for wm in (0.0, 0.1):
            assert_same(w, ["paged:16", "paged:8", "contiguous:first-fit:exact",
                            "contiguous:best-fit:pow2", "contiguous:buddy:exact"],
                        CacheConfig(capacity_tokens=cap), EngineConfig(watermark=wm), [3, 11])


def test_windows_apply_events_at_once(monkeypatch):
    """Not an equivalence check: on a stream nobody waits on, admissions and finishes are
    taken inside windows (Lane.step runs for few of the steps)."""
    calls = _count_lane_steps(monkeypatch)
    w = generate(WorkloadConfig("sharegpt-like", num_requests=400, rate=5.0, seed=2))
    sim = Simulation(w, [LaneSpec.parse("paged:16"), LaneSpec.parse("contiguous:buddy:pow2")],
                     CacheConfig(capacity_tokens=65536))
    sim.run()
    finished = [e for e in sim.events.events if e.kind == "finished"]
    assert len(finished) == 800
    assert calls["n"] < 40


def test_prefix_caching_windows_cache_and_evict_as_stepping():
    """Prefix-caching lanes in windows: every block filled is cached under its key, freed
    blocks join the LRU, takes evict it (evicted events per step); arrivals that may hit a
    shared prefix end the window (the step looks the cache up)."""
    evicted = []
    for share, cap in ((0.0, 8192), (0.0, 65536), (0.6, 4096), (0.6, 16384)):
        w = generate(WorkloadConfig("sharegpt-like", num_requests=150, rate=8.0, seed=5,
                                    prefix_share=share, max_seq_len=1024))
        jump = assert_same(w, ["paged:16:prefix", "paged:1:prefix", "paged:64:prefix"],
                           CacheConfig(capacity_tokens=cap), EngineConfig(max_seq_len=1024),
                           [40, 400])
        evicted.append(any(e.kind == "evicted" for e in jump.events.events))
    assert evicted[0] and evicted[2]


def test_queue_windows_give_the_step_engines_results():
    """Contiguous lanes while requests wait (kvviz/engine/queue.py): the head refused for
    memory, for max_num_seqs, for the budget; a prompt admitted in chunks; a request too big
    for the cache rejected; arrivals into an empty queue."""
    w = generate(WorkloadConfig("sharegpt-like", num_requests=120, rate=20.0, seed=4,
                                max_seq_len=512))
    big = _trace([0.0, 0.0, 0.01, 0.2, 0.2, 0.3, 0.5, 3.0], [300, 20, 600, 100, 90, 650, 5, 7],
                 [200, 30, 10, 40, 60, 100, 3, 2])  # 600: past max_seq_len; 650 + 100: too big
    lanes = ["contiguous:first-fit:max", "contiguous:best-fit:exact", "contiguous:buddy:pow2"]
    for seqs, budget in ((256, 8192), (3, 8192), (256, 64)):
        engine = EngineConfig(max_num_seqs=seqs, max_batched_tokens=budget, max_seq_len=512)
        assert_same(w, lanes, CacheConfig(capacity_tokens=4096), engine, [25, 300])
        jump = assert_same(big, lanes, CacheConfig(capacity_tokens=700), engine, [4, 90])
        assert all(x.rejected >= 1 for x in jump.lanes)


def test_queue_windows_ask_again_where_the_budget_grows():
    """Chunked prefill off: a step's admissions leave the budget short of the head's prompt
    (POLICY); the next step's budget pays only their decodes, so it admits more. A queue
    window must ask there, and need not after the head was refused for memory."""
    n = 24
    w = _trace([0.0] * n, [400] * n, [50] * n)
    lanes = ["contiguous:first-fit:max", "contiguous:buddy:exact"]
    for cap in (65536, 4000):
        engine = EngineConfig(max_num_seqs=256, max_batched_tokens=2048, max_seq_len=512,
                              enable_chunked_prefill=False)
        jump = assert_same(w, lanes, CacheConfig(capacity_tokens=cap), engine, [40])
        assert all(x.done == n for x in jump.lanes)


def test_spans_ask_again_where_the_budget_grows():
    """The same for paged lanes, whose spans reuse the step's own refusal of the head
    (Scheduler.head_refusal): with chunked prefill off that refusal (POLICY, the budget
    short) does not hold at the next step, whose budget pays only decodes."""
    n = 24
    w = _trace([0.0] * n, [400] * n, [50] * n)
    engine = EngineConfig(max_num_seqs=256, max_batched_tokens=2048, max_seq_len=512,
                          enable_chunked_prefill=False)
    jump = assert_same(w, ["paged:16", "paged:16:prefix"], CacheConfig(capacity_tokens=65536),
                       engine, [40])
    assert all(x.done == n for x in jump.lanes)


def test_queue_windows_skip_the_steps_between(monkeypatch):
    """Not an equivalence check: a contiguous lane whose head waits for memory nearly every
    step is asked at few steps (Lane.step runs for few of them)."""
    calls = _count_lane_steps(monkeypatch)
    w = generate(WorkloadConfig("sharegpt-like", num_requests=300, rate=5.0, seed=2))
    sim = Simulation(w, [LaneSpec.parse("contiguous:first-fit:max")],
                     CacheConfig(capacity_tokens=65536))
    sim.run()
    assert sim.lanes[0].summary()["pressure_steps"] > sim.step_no / 2
    assert calls["n"] < 20
