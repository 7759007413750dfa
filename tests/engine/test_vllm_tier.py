"""kvviz's paged lane against vLLM 0.32's own Scheduler and KVCacheManager (run in the vLLM
venv, tests/engine/vllm_ref.py), step by step: tokens scheduled per request, preemptions,
finishes, prefix hits, the running order and every running request's block ids (kvviz's
block b is vLLM's b + 1); then the totals. Each test compares with what vLLM did in this run.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from tests.engine.vllm_ref import VllmServer, assert_same, case, run_kvviz, streams, workload
from tests.examples import examples

pytestmark = pytest.mark.vllm


@pytest.fixture(scope="module")
def vllm():
    server = VllmServer()
    yield server
    server.close()


def _check(vllm, w, label, **kw):
    c = case(w, **kw)
    kv = run_kvviz(w, c)
    assert_same(kv, vllm.run(c), label)
    return kv["lane"]


def _stream(seed, n, arrive_over, p_hi, o_hi):
    rng = np.random.default_rng(seed)
    arr = np.sort(rng.integers(1, arrive_over + 1, n))
    return workload(arr, rng.integers(1, p_hi, n), rng.integers(1, o_hi, n))


def _shared(seed, n, arrive_over, groups=3, sys_blocks=3):
    """Requests that open with one of a few system prompts (whole 16-token blocks), then
    text of their own; some repeat an earlier request's prompt exactly."""
    rng = np.random.default_rng(seed)
    prompt, chains, nxt = [], [], 1000
    for _ in range(n):
        if chains and rng.random() < 0.2:
            k = int(rng.integers(len(chains)))
            prompt.append(prompt[k])
            chains.append(chains[k])
            continue
        g = int(rng.integers(groups))
        own = int(rng.integers(1, 60))
        p = sys_blocks * 16 + own
        c = [g * 100 + j for j in range(sys_blocks)] + list(range(nxt, nxt + -(-own // 16)))
        nxt += len(c)
        prompt.append(p)
        chains.append(c)
    arr = np.sort(rng.integers(1, arrive_over + 1, n))
    return workload(arr, prompt, rng.integers(1, 50, n), chains)


@pytest.mark.parametrize("prefix", [False, True])
@pytest.mark.parametrize("chunked", [True, False])
def test_all_at_once_under_pressure(vllm, prefix, chunked):
    """40 requests at step 1 into 30 blocks: admissions stop at memory, decodes preempt."""
    w = _stream(1, 40, 1, 120, 80)
    lane = _check(vllm, w, "at once", num_blocks=30, max_num_seqs=12,
                  max_num_batched_tokens=256, chunked=chunked, prefix=prefix)
    assert lane.preemptions > 0


@pytest.mark.parametrize("prefix", [False, True])
def test_spread_arrivals(vllm, prefix):
    w = _stream(2, 50, 60, 100, 60)
    _check(vllm, w, "spread", num_blocks=40, max_num_seqs=8, max_num_batched_tokens=96,
           prefix=prefix)


@pytest.mark.parametrize("blocks", [20, 64])
def test_shared_prefixes_with_eviction(vllm, blocks):
    """System prompts shared through the cache while cached blocks are evicted (fewer of
    them with 64 blocks)."""
    w = _shared(3, 60, 40)
    lane = _check(vllm, w, f"shared prefixes, {blocks} blocks", num_blocks=blocks,
                  max_num_seqs=6, max_num_batched_tokens=128, prefix=True)
    assert lane.prefix_hit_tokens > 0
    assert lane.alloc.usage().evictions > 0  # every full block is cached, outputs too


@pytest.mark.parametrize("prefix", [False, True])
def test_long_prompts_over_the_budget(vllm, prefix):
    """Prompts of up to 600 tokens with a 64-token budget: prefills take many chunks."""
    w = _stream(4, 12, 10, 600, 30)
    _check(vllm, w, "long prompts", num_blocks=160, max_num_seqs=6, max_num_batched_tokens=64,
           prefix=prefix)


def test_watermark(vllm):
    w = _stream(5, 40, 5, 100, 60)
    _check(vllm, w, "watermark", num_blocks=40, max_num_seqs=10, max_num_batched_tokens=128,
           watermark=0.1)


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(streams())
def test_any_stream_matches_vllm(vllm, stream):
    w, kw = stream
    _check(vllm, w, f"hypothesis {kw}", **kw)


@pytest.mark.parametrize("prefix", [False, True])
def test_many_requests_under_heavy_preemption(vllm, prefix):
    """150 sharegpt-like requests at once into 48 blocks, many preemptions and resumes."""
    from kvviz.core.config import WorkloadConfig
    from kvviz.core.workload import generate

    w = generate(WorkloadConfig("alpaca-like", num_requests=150, seed=7, max_seq_len=400,
                                prefix_share=0.5 if prefix else 0.0, prefix_tokens=32))
    w = workload(np.ones(len(w)), w.prompt, w.output,
                 [w.chain(i).tolist() for i in range(len(w))] if prefix else None,
                 16 if not prefix else w.chains()[2])
    lane = _check(vllm, w, "heavy preemption", num_blocks=48, max_num_seqs=32,
                  max_num_batched_tokens=512, prefix=prefix)
    assert lane.preemptions > 20 and (lane.prefix_hit_tokens > 0) == prefix
