"""Prefix reuse by hash chains: matched at each lane's own block size, never across content."""
from __future__ import annotations

import numpy as np
import pytest

from kvviz.core.config import CacheConfig, EngineConfig, LaneSpec, model_preset
from kvviz.engine import Simulation
from kvviz.engine.kvpool import KVPool, Prefix
from kvviz.traces import read_trace_bytes
from tests.traces import samples as S


def hits(bs: int, first: list[int], second: list[int], prompt: int, block: int = 512) -> int:
    """Prefix-hit tokens of a prompt of chain `second` after one of chain `first` (chains of
    `block`-token trace blocks), each followed by one token of its own (vLLM never hits the
    block of a prompt's last known token)."""
    a = KVPool(LaneSpec("paged", bs, prefix_caching=True), 16384, chain_block=block)
    a.admit(1, prompt + 1, prefix=Prefix(first, prompt))
    before = a.prefix_hit_tokens
    assert a.admit(2, prompt + 1, prefix=Prefix(second, prompt)).ok
    return a.prefix_hit_tokens - before


def test_a_512_token_trace_block_is_32_blocks_of_a_16_token_lane():
    assert hits(16, [1, 2], [1, 3], 1024) == 512  # 32 lane blocks


def test_chains_diverging_mid_prompt_share_up_to_the_divergence():
    assert hits(16, [1, 2, 3, 4], [1, 2, 9, 10], 2048) == 1024


def test_a_lane_block_larger_than_a_trace_block_needs_every_trace_block_to_match():
    assert hits(1024, [1, 2], [1, 3], 1024) == 0
    assert hits(1024, [1, 2], [1, 2], 1024) == 1024


def test_a_lane_block_straddling_trace_blocks_needs_all_it_covers():
    assert hits(768, [1, 2, 3], [1, 2, 4], 1536) == 768  # lane block 1 covers trace blocks 1, 2


def test_only_whole_lane_blocks_inside_the_prompt_are_shared():
    assert hits(16, [1, 2], [1, 2], 1000) == 992  # the last 8 prompt tokens are a partial block


def test_contiguous_pools_never_share():
    a = KVPool(LaneSpec("contiguous", 1), 4096)
    chain = Prefix([1, 2], 600)
    assert a.admit(1, 600, prefix=chain).ok and a.admit(2, 600, prefix=chain).ok
    assert a.prefix_hit_tokens == 0 and a.usage().allocated_tokens == 1200


def run(w, lanes, capacity=20_000) -> list[dict]:
    cache = CacheConfig(capacity_tokens=capacity, model=model_preset("tiny-cpu"))
    rows = Simulation(w, [LaneSpec.parse(x) for x in lanes], cache,
                      EngineConfig(max_seq_len=int(w.final_len.max()))).run()
    for r in rows:
        r.pop("wall_seconds")
    return rows


MOON = S.mooncake([(i * 200, 1100 + 37 * i, 20, [1, 2, 100 + i]) for i in range(30)])


def test_prefix_hit_rate_per_lane_and_zero_without_prefix_caching():
    w, _ = read_trace_bytes(MOON, "m.jsonl")
    rows = {r["lane"]: r for r in run(w, ["paged:16", "paged:16:prefix",
                                          "contiguous:first-fit:exact"])}
    assert rows["paged:16"]["prefix_hit_rate"] == 0.0
    assert rows["contiguous:first-fit:exact"]["prefix_hit_rate"] == 0.0
    # 29 of 30 requests find the 1024 tokens of blocks 1, 2 cached
    prompts = sum(1100 + 37 * i for i in range(30))
    assert rows["paged:16:prefix"]["prefix_hit_rate"] == pytest.approx(29 * 1024 / prompts)


def test_hash_chains_change_nothing_with_prefix_caching_off():
    w, _ = read_trace_bytes(MOON, "m.jsonl")
    plain = w.__class__(w.arrival_s, w.prompt, w.output, w.prefix_group)
    lanes = ["paged:16", "paged:64", "contiguous:first-fit:max"]
    assert run(w, lanes, 8000) == run(plain, lanes, 8000)


def test_prefix_sharing_workload_is_system_prompts_and_conversations():
    from kvviz.core.config import WorkloadConfig
    from kvviz.core.workload import CHAIN_BLOCK, generate

    w = generate(WorkloadConfig(num_requests=400, prefix_share=1.0, prefix_tokens=64, seed=2,
                                max_seq_len=100_000))
    ptr, ids, block = w.chains()
    assert block == CHAIN_BLOCK and w.clipped == 0
    chains = [ids[ptr[r] : ptr[r + 1]].tolist() for r in range(len(w))]
    sys_blocks = 64 // CHAIN_BLOCK
    # every request opens with one of the 4 system prompts' blocks
    assert {tuple(c[:sys_blocks]) for c in chains} == {
        tuple(range(g * sys_blocks, (g + 1) * sys_blocks)) for g in range(4)}
    # follow-up turns extend an earlier turn's whole prompt blocks beyond the system prompt
    follow = [r for r in range(len(w)) if any(
        len(chains[q]) > sys_blocks and w.prompt[q] // block > sys_blocks
        and chains[r][: w.prompt[q] // block] == chains[q][: w.prompt[q] // block]
        for q in range(r))]
    assert len(follow) > len(w) // 4
    rows = run(w, ["paged:16:prefix", "paged:16"], capacity=400_000)
    assert rows[0]["prefix_hit_rate"] > 0.3 and rows[1]["prefix_hit_rate"] == 0.0


def test_a_batch_emptied_by_preemption_resumes_instead_of_stalling():
    # found by the content property: shared blocks free less than preemption counts on, so a
    # step can preempt every running sequence; the next step must readmit them
    from kvviz.core.workload import Workload

    rows = [(0.0, 13, 20, [0, 1]), (0.108, 28, 36, [0, 1, 2, 3]), (0.216, 26, 22, [4, 5, 6, 7]),
            (0.259, 8, 30, [8]), (0.34, 37, 34, [0, 1, 9, 10, 11]), (0.51, 30, 20, [0, 1, 2, 3]),
            (0.666, 26, 2, [12, 13, 14, 15]), (0.717, 39, 31, [16, 17, 18, 19, 20]),
            (1.179, 7, 12, [21]), (1.267, 41, 29, [0, 1, 2, 3, 22, 23]),
            (1.482, 21, 40, [24, 25, 26]), (1.74, 25, 16, [27, 28, 29, 30]),
            (2.167, 25, 38, [31, 32, 33, 34]), (2.19, 13, 10, [35, 36]),
            (2.235, 12, 32, [37, 38]), (3.108, 1, 1, [39])]
    ids = [h for *_, c in rows for h in c]
    ptr = np.concatenate([[0], np.cumsum([len(c) for *_, c in rows])])
    w = Workload(np.array([r[0] for r in rows]), np.array([r[1] for r in rows]),
                 np.array([r[2] for r in rows]), np.full(len(rows), -1), chain_ptr=ptr,
                 chain_ids=np.array(ids), chain_block=8)
    cache = CacheConfig(capacity_tokens=128, model=model_preset("tiny-cpu"))
    sim = Simulation(w, [LaneSpec.parse("paged:4:prefix"), LaneSpec.parse("paged:8:prefix")],
                     cache, EngineConfig(max_seq_len=int(w.final_len.max()), max_num_seqs=8))
    rows_out = sim.run(max_steps=5000)
    assert sim.finished and all(r["finished"] == len(rows) for r in rows_out)
