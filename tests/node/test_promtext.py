from __future__ import annotations

import json

import pytest

from kvviz.node.known_metrics import KNOWN_METRICS, engine_of_series, name_variants
from kvviz.node.promtext import (
    GarbledMetricsError,
    NodeSample,
    NodeStatus,
    parse_series,
    sample_from_text,
    series_key,
)
from tests.node.fakes import SGLANG_TEXT, VLLM_TEXT


def parse(text: str) -> NodeSample:
    return sample_from_text(text, url="http://n/metrics", time=100.0)


def test_vllm_fixture_sums_engines_and_weights_usage_by_capacity():
    s = parse(VLLM_TEXT)
    assert s.ok and s.engine == "vllm"
    assert s.num_running == 8 and s.num_waiting == 2
    assert s.block_size == 16 and s.num_gpu_blocks == 4000
    # vLLM v1 keeps one null block per engine back: 999 and 2999 usable blocks of 16 slots
    assert s.kv_capacity_tokens == (999 + 2999) * 16
    # engine 0: 0.5 of 999 usable blocks, engine 1: 0.25 of 2999, weighted by capacity
    assert s.kv_used_tokens == pytest.approx((0.5 * 999 + 0.25 * 2999) * 16)
    assert s.kv_usage == pytest.approx((0.5 * 999 + 0.25 * 2999) / (999 + 2999))


def test_vllm_counters_read_with_total_suffix():
    s = parse(VLLM_TEXT)
    assert s.preemptions_total == 12
    assert s.prefix_queries_total == 4000 and s.prefix_hits_total == 1000
    assert s.prefix_hit_rate == pytest.approx(0.25)


def test_created_timestamps_are_not_counted_as_series():
    s = parse(VLLM_TEXT)
    assert not any("_created" in k for k in s.raw)
    key = 'vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",' \
          'model_name="meta-llama/Llama-3.1-8B-Instruct"}'
    assert s.raw[key] == 60.0


@pytest.mark.parametrize("type_line, sample_name", [
    ("vllm:num_preemptions counter", "vllm:num_preemptions_total"),
    ("vllm:num_preemptions_total counter", "vllm:num_preemptions_total"),
    ("vllm:num_preemptions gauge", "vllm:num_preemptions"),
])
def test_counter_found_with_or_without_total(type_line, sample_name):
    s = parse(f"# TYPE {type_line}\n{sample_name}{{engine=\"0\"}} 9\n")
    assert s.preemptions_total == 9


def test_sglang_fixture_skips_tensor_parallel_duplicates():
    s = parse(SGLANG_TEXT)
    assert s.ok and s.engine == "sglang"
    assert s.num_running == 12 and s.num_waiting == 3  # not doubled by tp_rank 1
    assert s.kv_capacity_tokens == 400000 and s.kv_used_tokens == 112000
    assert s.kv_usage == pytest.approx(0.28)
    assert s.block_size == 16 and s.num_gpu_blocks == 25000
    assert s.prefix_hit_rate == pytest.approx(0.0075)
    assert s.preemptions_total is None


def test_sglang_usage_gauge_used_when_token_counts_absent():
    s = parse('sglang:token_usage{model_name="a"} 0.5\nsglang:token_usage{model_name="b"} 0.7\n')
    assert s.kv_usage == pytest.approx(0.6) and s.kv_capacity_tokens is None


def test_old_vllm_usage_name_and_unweighted_mean_without_config():
    s = parse('vllm:gpu_cache_usage_perc{engine="0"} 0.2\n'
              'vllm:gpu_cache_usage_perc{engine="1"} 0.6\n')
    assert s.kv_usage == pytest.approx(0.4)
    assert s.kv_capacity_tokens is None and s.kv_used_tokens is None


def test_nan_gauge_is_missing_not_nan():
    s = parse("vllm:kv_cache_usage_perc NaN\n")
    assert s.kv_usage is None
    assert json.dumps(s.to_dict())  # NaN in raw becomes null


def test_unknown_exporter_is_ok_with_unknown_engine():
    s = parse("# TYPE node_load1 gauge\nnode_load1 0.5\n")
    assert s.ok and s.engine == "unknown" and s.kv_usage is None
    assert s.raw == {"node_load1": 0.5}


def test_empty_body_is_ok_but_says_no_series():
    s = parse("")
    assert s.ok and s.message == "no series exported"


@pytest.mark.parametrize(
    "text", ["<html><body>hi</body></html>", "foo bar baz", "m{a=\"x\"} abc\n"])
def test_garbled_text_raises(text):
    with pytest.raises(GarbledMetricsError, match="not Prometheus text format"):
        parse_series(text)


def test_to_dict_round_trip_through_json():
    s = parse(VLLM_TEXT)
    back = NodeSample.from_dict(json.loads(json.dumps(s.to_dict())))
    assert back == s and back.status is NodeStatus.OK


def test_series_key_sorts_and_escapes_labels():
    assert series_key("m", {}) == "m"
    assert series_key("m", {"b": 'x"y', "a": "1"}) == 'm{a="1",b="x\\"y"}'


def test_known_metrics_table_is_consistent():
    names = [m.name for m in KNOWN_METRICS]
    assert len(names) == len(set(names))
    for m in KNOWN_METRICS:
        assert engine_of_series(m.name) == m.engine
        assert not (m.kind == "counter" and m.name.endswith("_total"))
    assert name_variants("a_total") == ("a_total", "a")
    assert name_variants("a") == ("a", "a_total")
