"""A lane's refusals, rejections and admissions, checked against the allocator's state.

Every admit_failed class is re-derived by brute force (tests/alloc/brute.py) from the lane's
allocator at the moment of the refusal, for every placement and reservation mode.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvviz.core.admission import Reason
from kvviz.core.config import CacheConfig, EngineConfig, LaneSpec, WorkloadConfig
from kvviz.core.workload import Workload, generate
from kvviz.engine import Simulation
from tests.alloc.brute import brute_class, need_units
from tests.examples import examples

LANES = ["paged:16", "paged:16:prefix", "paged:1"] + [
    f"contiguous:{p}:{r}" for p in ("first-fit", "best-fit", "buddy")
    for r in ("max", "pow2", "exact")]


def _sim(w: Workload, lane: str, tokens: int, **eng) -> Simulation:
    eng = {"max_seq_len": 512, **eng}
    return Simulation(w, [LaneSpec.parse(lane)], CacheConfig(capacity_tokens=tokens),
                      EngineConfig(**eng))


def _need(lane, rid: int) -> int:
    """Slots the lane asks the allocator to place for waiting request `rid`: all its known
    tokens (prompt + generated, vLLM checks the whole sequence) or its reservation; a paged
    lane asks only for the blocks its cached prefix (whole blocks, never the last known
    token) does not cover, plus the cached ones it takes out of the free queue."""
    n = int(lane.req.num_tokens[rid])
    if not lane.cfg.paged:
        return max(n, int(lane.req.reserve[rid]))
    bs = lane.cfg.block_size
    hits = _hits(lane, rid, n)
    return (-(-n // bs) - len(hits) + sum(bool(lane.pool.in_lru[b]) for b in hits)) * bs


def _hits(lane, rid: int, n: int) -> list[int]:
    """The cached blocks under rid's leading block hashes, up to the first miss."""
    from kvviz.engine.rule.keys import ROOT, block_hash
    from kvviz.engine.rule.pool import get_cached_block
    out, h = [], ROOT
    if not lane.cfg.prefix_caching:
        return out
    for k in range((n - 1) // lane.cfg.block_size):
        h = np.uint64(block_hash(lane.cfg, lane.req, rid, k, h))
        b = get_cached_block(lane.pool, h)
        if b < 0:
            break
        out.append(int(b))
    return out


def _capture_refusals(lane) -> list[tuple]:
    """At each refusal (between schedule and update), the lane's own answer and the
    brute-force class."""
    seen: list[tuple] = []

    def spy(lane):
        refused = lane.last_plan.refused
        if refused is None:
            return
        rid, adm = refused
        need = _need(lane, rid)
        seen.append((adm, brute_class(lane.alloc, need),
                     need_units(lane.alloc, need) * lane.alloc.block_size))

    lane.after_schedule = spy
    return seen


@pytest.mark.parametrize("lane_spec", LANES)
@settings(max_examples=examples(4), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), rate=st.sampled_from([float("inf"), 40.0]),
       seqs=st.sampled_from([4, 256]))
def test_every_lane_refusal_has_the_brute_force_class(lane_spec, seed, rate, seqs):
    w = generate(WorkloadConfig("sharegpt-like", num_requests=30, rate=rate, max_seq_len=512,
                                seed=seed, prefix_share=0.5, prefix_tokens=48))
    s = _sim(w, lane_spec, 1024, max_num_seqs=seqs)
    seen = _capture_refusals(s.lanes[0])
    s.run(max_steps=20_000)
    assert s.finished
    for adm, brute, footprint in seen:
        assert adm.need_tokens == footprint
        if brute is None:  # memory would have served: only the scheduler can have said no
            assert adm.reason is Reason.POLICY
        else:
            assert adm.reason is brute


def test_rejected_events_carry_the_reservation_that_cannot_fit():
    w = Workload(np.zeros(2), np.array([10, 40]), np.array([5, 5]), np.full(2, -1))
    s = _sim(w, "contiguous:first-fit:max", 256, max_seq_len=300)  # reserves 300 > 256
    s.run(max_steps=100)
    rej = [e for e in s.events.events if e.kind == "rejected"]
    assert [(e.seq_id, e.reason, e.need_tokens) for e in rej] == [
        (0, "CAPACITY", 300), (1, "CAPACITY", 300)]
    assert all(e.free_tokens <= 256 < e.need_tokens for e in rej)


def test_a_paged_rejection_carries_the_final_length_in_whole_blocks():
    w = Workload(np.zeros(1), np.array([100]), np.array([190]), np.full(1, -1))
    s = _sim(w, "paged:16", 256, max_seq_len=512)  # 290 slots -> 19 blocks > 16
    s.run(max_steps=100)
    (e,) = [e for e in s.events.events if e.kind == "rejected"]
    assert (e.reason, e.need_tokens, e.free_tokens) == ("CAPACITY", 304, 256)


@pytest.mark.parametrize("lane_spec, footprint", [  # (prompt, final length) -> slots placed
    ("paged:16", lambda p, f: -(-p // 16) * 16),
    ("contiguous:first-fit:max", lambda p, f: 512),
    ("contiguous:buddy:exact", lambda p, f: 1 << (f - 1).bit_length()),
])
def test_each_admission_records_the_free_total_right_after_it(lane_spec, footprint):
    w = Workload(np.zeros(4), np.array([20, 33, 70, 9]), np.array([30, 40, 50, 60]),
                 np.full(4, -1))
    s = _sim(w, lane_spec, 8192, watermark=0.0)
    s.step()
    adm = [e for e in s.events.events if e.kind == "admitted"]
    assert [e.seq_id for e in adm] == [0, 1, 2, 3]
    placed = [footprint(int(p), int(f)) for p, f in zip(w.prompt, w.final_len)]
    assert [e.free_tokens for e in adm] == (8192 - np.cumsum(placed)).tolist()
