"""vLLM 0.32's rules on hand-made streams, without vLLM (the tier in test_vllm_tier.py checks
the same against vLLM itself): one test per rule of docs/FIDELITY.md."""
from __future__ import annotations

import numpy as np

from kvviz.core.config import EngineConfig, LaneSpec
from kvviz.core.workload import Workload
from kvviz.engine.lane import Lane


def lane(prompt, output, *, arrive=None, blocks=64, bs=16, prefix=False, arrived=None,
         **eng) -> Lane:
    n = len(prompt)
    w = Workload(np.asarray(arrive if arrive is not None else [0.0] * n, float),
                 np.asarray(prompt, np.int64), np.asarray(output, np.int64),
                 np.full(n, -1, np.int64))
    spec = LaneSpec("paged", bs, prefix_caching=prefix)
    ln = Lane("x", spec, w, EngineConfig(step_ms=1000.0, **eng), blocks * bs)
    ln.arrive(n if arrived is None else arrived)
    return ln


def test_the_prefill_step_samples_the_first_token_and_the_last_token_gets_no_slot():
    ln = lane([20], [3])
    ln.step(1.0)
    assert ln.last_plan.counts.tolist() == [20] and ln.generated[0] == 1
    ln.step(2.0)
    assert ln.run_len.tolist() == [21] and ln.alloc.block_table(0).size == 2
    ln.step(3.0)  # the third token is sampled here and the request is freed at once
    assert ln.done == 1 and ln.step_no == 3 and ln.alloc.usage().allocated_tokens == 0


def test_the_budget_pays_running_decodes_first_then_a_prefill_chunk():
    ln = lane([10, 100], [50, 5], max_batched_tokens=32, arrived=1)
    ln.step(1.0)  # request 0 prefills alone
    ln.arrive(2)
    ln.step(2.0)
    assert dict(zip(ln.last_plan.ids.tolist(), ln.last_plan.counts.tolist())) == {0: 1, 1: 31}
    ln.step(3.0)
    assert dict(zip(ln.last_plan.ids.tolist(), ln.last_plan.counts.tolist())) == {0: 1, 1: 31}


def test_an_identical_64_token_prompt_hits_48_tokens():
    w = Workload(np.array([0.0, 1.5]), np.array([64, 64]), np.array([10, 10]),
                 np.full(2, -1), chain_ptr=np.array([0, 4, 8]),
                 chain_ids=np.array([1, 2, 3, 4, 1, 2, 3, 4]), chain_block=16)
    spec = LaneSpec("paged", 16, prefix_caching=True)
    ln = Lane("x", spec, w, EngineConfig(step_ms=1000.0), 64 * 16)
    ln.arrive(1)
    ln.step(1.0)
    ln.arrive(2)
    ln.step(2.0)
    assert ln.last_plan.admitted == [1] and ln.last_plan.hit_tokens == [48]
    assert ln.last_plan.counts.tolist()[-1] == 16  # the budget pays only uncached tokens
    assert ln.alloc.block_table(1)[:3].tolist() == ln.alloc.block_table(0)[:3].tolist()


def test_a_preempted_request_hits_its_own_output_blocks_when_it_resumes():
    # 4 blocks: A (prompt 16) and B (prompt 8) grow until A needs a block and B, the last
    # running, is preempted; B's full block (prompt 8 + 8 outputs) stays cached, its
    # partial block goes to the front of the free queue and serves A.
    ln = lane([16, 8], [33, 40], blocks=4, prefix=True)
    while not ln.preemptions:
        ln.step(ln.step_no + 1.0)
    assert ln.last_plan.preempted == [1]
    while 1 not in ln.last_plan.admitted:
        ln.step(ln.step_no + 1.0)
    assert ln.last_plan.hit_tokens[ln.last_plan.admitted.index(1)] == 16  # > its prompt


def test_freed_blocks_come_back_tail_first():
    ln = lane([40, 8], [1, 1], arrive=[0.0, 1.5], arrived=1)
    ln.step(1.0)  # request 0 takes blocks 0, 1, 2 and finishes
    ln.arrive(2)
    ln.step(2.0)
    assert ln.last_plan.admitted == [1]
    (e,) = [x for x in ln.drain(0, ("x",)).to_events() if x.kind == "admitted" and x.seq_id == 1]
    assert e.free_tokens == 63 * 16
    ln2 = lane([40, 8], [1, 2], arrive=[0.0, 1.5], arrived=1)
    ln2.step(1.0)
    ln2.arrive(2)
    ln2.step(2.0)
    assert ln2.alloc.block_table(1).tolist() == [2]  # request 0's last block, freed first


def test_the_watermark_counts_the_null_block_and_is_waived_for_an_empty_batch():
    # kept free: int(0.1 x (usable blocks + vLLM's null block)) = 1 block here
    ln = lane([160, 16], [1, 5], blocks=10, watermark=0.1)
    ln.step(1.0)  # 10 of 10 blocks: the empty batch waives the watermark
    assert ln.last_plan.admitted == [0]
    assert ln.last_plan.refused[1].reason.value == "CAPACITY"
    ln2 = lane([16, 160], [5, 5], blocks=11, watermark=0.1)
    ln2.step(1.0)  # 10 free for a need of 10, but 10 + 1 > 10
    assert ln2.last_plan.admitted == [0]
    assert ln2.last_plan.refused[1].reason.value == "POLICY"
