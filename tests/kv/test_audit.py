"""The real-mode audit: passes on honest pools of every lane kind, catches each planted fault,
and the block tables recorded with the map decode to the allocator's tables."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from kvviz.core.blockmap import FREE
from kvviz.core.config import CacheConfig, EngineConfig, LaneSpec, WorkloadConfig, model_preset
from kvviz.core.workload import generate
from kvviz.engine import Simulation
from kvviz.kv.attention import paged_decode_attention
from kvviz.kv.audit import Auditor
from kvviz.kv.real import RealKV

MODEL = model_preset("tiny-cpu")
LANES = ("contiguous:first-fit:max", "contiguous:best-fit:exact", "contiguous:buddy:pow2",
         "paged:16", "paged:8:prefix")


def _sim(lanes=LANES, steps: int = 40, dtype=None, seed: int = 1) -> Simulation:
    w = generate(WorkloadConfig(preset="sharegpt-like", num_requests=40, rate=float("inf"),
                                max_seq_len=384, prefix_share=0.6, seed=seed))
    sim = Simulation(w, [LaneSpec.parse(s) for s in lanes],
                     CacheConfig(capacity_tokens=3072, model=MODEL),
                     EngineConfig(max_num_seqs=24, max_seq_len=384),
                     kv_factory=lambda a: RealKV(a, MODEL, "cpu", 3, dtype=dtype,
                                                 backend="torch"))
    for ln in sim.lanes:
        ln.kv.bind_workload(w)
    for i in range(steps):
        sim.step(time_s=0.05 * i)
    return sim


def _audit(lane, **kw):
    return Auditor(lane.kv, **kw).audit(lane.run_ids, lane.run_len, lane.alloc.snapshot())


def _lane(sim, name):
    return next(ln for ln in sim.lanes if ln.name == name)


def _slot(lane, seq: int, pos: int) -> int:
    if lane.alloc.contiguous:
        return int(lane.alloc.ranges(np.asarray([seq]))[0, 0]) + pos
    bs = lane.alloc.block_size
    return int(lane.alloc.block_table(seq)[pos // bs]) * bs + pos % bs


def test_audit_passes_on_every_lane_kind_at_every_sample():
    sim = _sim(steps=0)
    auditors = {ln.name: Auditor(ln.kv) for ln in sim.lanes}
    shared = 0
    for i in range(60):
        sim.step(time_s=0.05 * i)
        if i % 5 == 4:
            for ln in sim.lanes:
                bm = ln.alloc.snapshot()
                res = auditors[ln.name].audit(ln.run_ids, ln.run_len, bm)
                assert res.ok, (ln.name, res.failures)
                assert res.checks >= int(ln.run_len.sum())
                shared += int((bm.refcount > 1).sum())
    assert shared > 0  # the prefix lane really shared blocks while audited


def test_audit_passes_on_bfloat16_pools():
    sim = _sim(lanes=("paged:16", "contiguous:first-fit:max"), dtype="bfloat16")
    for ln in sim.lanes:
        res = _audit(ln)
        assert res.ok, res.failures


@pytest.mark.parametrize("name", ["paged:16", "contiguous:first-fit:max"])
def test_a_corrupted_slot_is_named(name):
    sim = _sim()
    lane = _lane(sim, name)
    aud = Auditor(lane.kv)
    assert aud.audit(lane.run_ids, lane.run_len, lane.alloc.snapshot()).ok  # memo warm
    seq, pos = int(lane.run_ids[-1]), int(lane.run_len[-1]) - 1
    kvh, d = MODEL.num_kv_heads, MODEL.head_dim
    lane.kv.cache.v[1].view(-1, kvh, d)[_slot(lane, seq, pos), 1, 3] += 0.5
    res = aud.audit(lane.run_ids, lane.run_len, lane.alloc.snapshot())
    content = [f for f in res.failures if f.check == "content"]
    assert res.failed >= 1 and content and content[0].seq_id == seq
    assert f"position {pos}" in content[0].reason


def test_failures_name_sequences_by_their_run_wide_ids():
    sim = _sim(lanes=("paged:16",))
    lane = sim.lanes[0]
    seq = int(lane.run_ids[0])
    lane.kv.cache.k[0].view(-1, MODEL.num_kv_heads, MODEL.head_dim)[_slot(lane, seq, 0)] = 5.0
    res = Auditor(lane.kv).audit(lane.run_ids, lane.run_len, lane.alloc.snapshot(),
                                 id_offset=1000)
    assert res.failures and all(f.seq_id == seq + 1000 for f in res.failures)
    assert f"sequence {seq + 1000} position 0" in res.failures[0].reason


def test_a_slot_holding_another_sequences_kv_is_caught():
    sim = _sim()
    lane = _lane(sim, "paged:16")
    a, b = (int(s) for s in lane.run_ids[:2])
    for layer in range(MODEL.num_layers):
        flat = lane.kv.cache.k[layer].view(-1, MODEL.num_kv_heads, MODEL.head_dim)
        flat[_slot(lane, a, 0)] = flat[_slot(lane, b, 0)]
    res = _audit(lane)
    assert any(f.check == "content" and f.seq_id == a for f in res.failures)


def test_a_block_in_two_tables_is_caught():
    sim = _sim(lanes=("paged:16",))
    lane = sim.lanes[0]
    a, b = (int(s) for s in lane.run_ids[:2])
    lane.pool.block_table[lane.req.row[b], 0] = lane.alloc.block_table(a)[0]  # fault: b reads a's
    res = _audit(lane)
    tables = [f for f in res.failures if f.check == "tables"]
    assert any("in 2 block tables" in f.reason for f in tables)
    assert any("in no block table" in f.reason for f in tables)  # b's own block is orphaned


def test_a_freed_block_still_in_a_table_is_caught():
    sim = _sim(lanes=("paged:16",))
    lane = sim.lanes[0]
    alloc = lane.alloc
    bm = alloc.snapshot()
    free = int(np.flatnonzero(bm.owner == FREE)[0])
    seq = int(lane.run_ids[0])
    lane.pool.block_table[lane.req.row[seq], 0] = free
    res = _audit(lane)
    assert any(f.check == "tables" and f"block {free} is free" in f.reason
               for f in res.failures)


def test_overlapping_contiguous_ranges_are_caught():
    sim = _sim(lanes=("contiguous:first-fit:max",))
    lane = sim.lanes[0]
    a, b = (int(s) for s in lane.run_ids[:2])
    rows = lane.req.row[[a, b]]
    lane.pool.row_start[rows[1]] = lane.pool.row_start[rows[0]]  # fault: b's range is a's
    res = _audit(lane)
    assert any(f.check == "ranges" and "2 sequences' ranges" in f.reason for f in res.failures)


def test_a_wrong_attention_output_is_caught():
    sim = _sim(lanes=("paged:16",))
    lane = sim.lanes[0]

    def wrong(*args, **kw):
        out = paged_decode_attention(*args, **kw)
        out[0, 1] += 0.01
        return out
    res = Auditor(lane.kv, attend=wrong).audit(lane.run_ids, lane.run_len,
                                               lane.alloc.snapshot())
    checks = {f.check for f in res.failures}
    assert checks == {"attention"} and res.failed == MODEL.num_layers


def test_the_attention_samples_rotate_over_the_live_sequences():
    sim = _sim(lanes=("paged:16",))
    lane = sim.lanes[0]
    seen: set[int] = set()

    def spy(q, k, v, tables, lens, **kw):
        seen.update(int(n) for n in lens.tolist())
        return paged_decode_attention(q, k, v, tables, lens, **kw)
    aud = Auditor(lane.kv, attend=spy)
    for _ in range(lane.run_ids.size):
        assert aud.audit(lane.run_ids, lane.run_len, lane.alloc.snapshot()).ok
    assert seen == {int(n) for n in lane.run_len}


def test_a_slot_is_hashed_again_only_when_another_token_is_expected_there():
    sim = _sim(lanes=("paged:16",), steps=0)
    lane = sim.lanes[0]
    aud = Auditor(lane.kv)
    for i in range(20):
        sim.step(time_s=0.05 * i)
        bm = lane.alloc.snapshot()
        before = aud.memo.hashed
        assert aud.audit(lane.run_ids, lane.run_len, bm).ok
        new = aud.memo.hashed - before
        assert aud.audit(lane.run_ids, lane.run_len, bm).ok
        assert aud.memo.hashed - before == new  # the same state again: nothing hashed
        if i >= 5 and lane.run_ids.size:
            assert new < int(lane.run_len.sum())  # only the tokens written since


def test_expected_kv_is_what_decode_wrote():
    sim = _sim(lanes=("paged:16",), steps=10)
    lane = sim.lanes[0]
    seq, n = int(lane.run_ids[0]), int(lane.run_len[0])
    pos = np.arange(n)
    k, _ = lane.kv.expected_kv(np.full(n, seq), pos, 1)
    slots = torch.tensor([_slot(lane, seq, int(p)) for p in pos])
    got = lane.kv.cache.k[1].view(-1, MODEL.num_kv_heads, MODEL.head_dim)[slots]
    torch.testing.assert_close(got, k, rtol=1e-5, atol=1e-6)
