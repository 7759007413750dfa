"""A paged BlockMap's owners (docs/FORMAT.md, "What the planes mean"): a shared block is owned
by the first of its holders in `final_seq`'s order, the scheduler's running order (admission
order), as the vLLM plugin's lane names the first request in vLLM's table order. The rule
keeps no owner per block; the view derives it from the running tables at each snapshot."""
from __future__ import annotations

import numpy as np

from kvviz.core.blockmap import FREE
from kvviz.core.config import CacheConfig, EngineConfig, LaneSpec, WorkloadConfig
from kvviz.core.workload import generate
from kvviz.engine import Simulation


def first_holders(lane, bm) -> np.ndarray:
    """The owners re-derived in Python: each block's first holder in run_ids' order."""
    want = np.full(bm.num_blocks, FREE, np.int64)
    for seq in lane.run_ids.tolist():
        for b in lane.alloc.block_table(seq).tolist():
            if want[b] == FREE:
                want[b] = seq
    return want


def test_a_shared_block_is_owned_by_its_first_holder_in_running_order() -> None:
    w = generate(WorkloadConfig("sharegpt-like", num_requests=150, rate=float("inf"),
                                max_seq_len=1024, prefix_share=0.9, prefix_tokens=128,
                                prefix_groups=2, seed=3))
    sim = Simulation(w, [LaneSpec.parse("paged:16:prefix")], CacheConfig(capacity_tokens=8192),
                     EngineConfig(max_num_seqs=48, max_batched_tokens=2048, max_seq_len=1024))
    lane = sim.lanes[0]
    shared = handed = 0
    before = lane.snapshot()
    while not sim.finished:
        sim.step()
        bm = lane.snapshot()
        assert np.array_equal(bm.final_seq, lane.run_ids)
        assert np.array_equal(bm.owner, first_holders(lane, bm)), sim.step_no
        assert np.array_equal(bm.owner != FREE, bm.refcount > 0)
        shared += int((bm.refcount > 1).sum())
        # shared before the step, held after it, another owner: its first holder left
        moved = (before.refcount > 1) & (bm.owner != FREE) & (before.owner != bm.owner)
        handed += int(moved.sum())
        before = bm
    assert lane.preemptions > 0 and shared > 0 and handed > 0
