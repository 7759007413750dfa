"""What the scrape reads from each engine's exposition: DP pools, preemptions, hybrid caveats,
and numbers that are not numbers (NaN, +Inf, beyond int64)."""
from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvviz.node.known_metrics import KNOWN_METRICS
from kvviz.node.promtext import GarbledMetricsError, NodeSample, pool_rows, sample_from_text
from kvviz.node.servers import INT64_MAX, as_int
from tests.node.fakes import FIXTURES, SGLANG_TEXT, VLLM_TEXT

DP_TEXT = (FIXTURES / "sglang_dp_attention_metrics.txt").read_text()
V0_TEXT = (FIXTURES / "vllm_v0_metrics.txt").read_text()
VLLM_HYBRID = (FIXTURES / "vllm_hybrid_metrics.txt").read_text()
SGLANG_HYBRID = (FIXTURES / "sglang_hybrid_metrics.txt").read_text()


def parse(text: str) -> NodeSample:
    return sample_from_text(text, url="http://n/metrics", time=1.0)


def test_sglang_dp_attention_ranks_are_summed_not_just_tp_rank_0():
    s = parse(DP_TEXT)
    assert s.kv_pools == 4
    assert s.kv_capacity_tokens == 500_000 and s.kv_used_tokens == 190_000
    assert (s.num_running, s.num_waiting) == (28, 6)


def test_sglang_dp_usage_is_capacity_weighted():
    # per rank 0.1, 0.5, 0.2, 0.9 of 100k, 100k, 200k, 100k: 0.38, not the plain mean 0.425
    assert parse(DP_TEXT).kv_usage == pytest.approx(0.38)
    only_usage = "\n".join(ln for ln in DP_TEXT.splitlines() if "num_used_tokens" not in ln)
    assert parse(only_usage).kv_usage == pytest.approx(0.38)


def test_sglang_dp_per_rank_detail_from_raw():
    rows = pool_rows(parse(DP_TEXT).raw)
    assert [r.pool for r in rows] == ["0", "1", "2", "3"]
    assert [r.capacity_tokens for r in rows] == [100_000, 100_000, 200_000, 100_000]
    assert [r.usage for r in rows] == pytest.approx([0.1, 0.5, 0.2, 0.9])
    assert [r.running for r in rows] == [4, 6, 8, 10]


def test_vllm_per_engine_detail_from_raw():
    rows = pool_rows(parse(VLLM_TEXT).raw)
    assert [(r.pool, r.capacity_tokens, r.running) for r in rows] == [
        ("0", (1000 - 1) * 16, 5), ("1", (3000 - 1) * 16, 3)]  # the null block aside


def test_tensor_parallel_duplicates_still_counted_once():
    s = parse(SGLANG_TEXT)
    assert (s.num_running, s.kv_capacity_tokens, s.kv_pools) == (12, 400_000, 1)


def test_sglang_retractions_are_its_preemptions():
    s = parse(DP_TEXT)
    assert s.preemptions_total == 7  # num_retracted_requests_total, summed over ranks
    assert s.preempted_recent == 1  # the num_retracted_reqs gauge


def test_vllm_v0_hit_rate_minus_one_means_prefix_caching_off():
    s = parse(V0_TEXT)
    assert s.prefix_caching_off and s.prefix_hit_rate is None
    assert (s.kv_usage, s.kv_capacity_tokens, s.preemptions_total) == (0.25, 32_000, 3)


def test_vllm_prefix_caching_on_is_not_off():
    s = parse(VLLM_TEXT)
    assert not s.prefix_caching_off and s.prefix_hit_rate == pytest.approx(0.25)


def test_vllm_hybrid_model_gets_a_caveat_instead_of_a_capacity():
    s = parse(VLLM_HYBRID)
    assert s.kv_capacity_tokens is None and s.kv_used_tokens is None
    assert "mamba_page_size_padded" in s.capacity_caveat and s.kv_usage == pytest.approx(0.4)
    assert parse(VLLM_TEXT).capacity_caveat == ""


def test_sglang_hybrid_model_gets_a_caveat():
    s = parse(SGLANG_HYBRID)
    assert "sglang:swa_token_usage" in s.capacity_caveat
    assert parse(SGLANG_TEXT).capacity_caveat == ""


@pytest.mark.parametrize("value", ["+Inf", "-Inf", "NaN", "1e300", "-1e30"])
def test_non_finite_or_huge_count_is_not_exported_and_does_not_raise(value):
    s = parse(f'vllm:num_requests_running{{engine="0"}} {value}\n'
              'vllm:num_requests_waiting{engine="0"} 2\n')
    assert s.num_running is None and s.num_waiting == 2
    assert json.dumps(s.to_dict(), allow_nan=False)


@pytest.mark.parametrize("v", [math.inf, math.nan, 2.0**63, -(2.0**64), "1e400", "None", None])
def test_as_int_refuses_what_int64_cannot_hold(v):
    assert as_int(v) is None


_NAMES = [m.name for m in KNOWN_METRICS] + ["vllm:num_preemptions_total", "other_metric"]
_LABEL_VALUES = st.sampled_from(["0", "1", "2", "6", "", "None", "nan", "1e400", "-1", "16",
                                 "x\\\"y", "99999999999999999999999"])
_VALUES = st.one_of(st.floats(allow_nan=True, allow_infinity=True),
                    st.sampled_from([0.0, 1.0, -1.0, 2.0**63, 1e308]))


@st.composite
def expositions(draw) -> str:
    lines = []
    for _ in range(draw(st.integers(0, 12))):
        name = draw(st.sampled_from(_NAMES))
        keys = draw(st.lists(st.sampled_from(["tp_rank", "dp_rank", "engine", "block_size",
                                              "num_gpu_blocks", "sliding_window",
                                              "enable_prefix_caching"]), unique=True,
                             max_size=4))
        labels = ",".join(f'{k}="{draw(_LABEL_VALUES)}"' for k in keys)
        lines.append(f"{name}{{{labels}}} {draw(_VALUES)!r}")
    return "\n".join(lines) + "\n"


@settings(max_examples=60, deadline=None)
@given(expositions())
def test_any_exposition_gives_a_json_safe_sample_or_a_garbled_error(text):
    try:
        s = parse(text)
    except GarbledMetricsError:
        return
    d = s.to_dict()
    json.dumps(d, allow_nan=False)
    for key in ("kv_capacity_tokens", "num_running", "num_waiting", "block_size",
                "num_gpu_blocks", "kv_pools", "preempted_recent"):
        assert d[key] is None or (isinstance(d[key], int) and abs(d[key]) <= INT64_MAX)
    pool_rows(s.raw)


def test_vllm_hybrid_pools_carry_no_token_capacity():
    assert [r.capacity_tokens for r in pool_rows(parse(VLLM_HYBRID).raw)] == [None]
