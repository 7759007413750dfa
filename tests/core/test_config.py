"""Invalid configurations raise ValueError naming the field."""
from __future__ import annotations

import math

import pytest

from kvviz.core.config import (
    CacheConfig,
    EngineConfig,
    LaneSpec,
    ModelShape,
    WorkloadConfig,
    check_lane_blocks,
    lane_caption,
    model_preset,
)


@pytest.mark.parametrize("kw", [dict(capacity_tokens=0), dict(capacity_tokens=-1),
                                dict(capacity_tokens=(1 << 40))])
def test_cache_config_names_the_bad_field(kw):
    with pytest.raises(ValueError, match="^capacity_tokens"):
        CacheConfig(**kw)


@pytest.mark.parametrize("lane, tokens, why", [
    ("paged:16", 8, "below one block of 16"),
    ("contiguous", (1 << 24) + 1, "over the limit"),
    ("paged:1", (1 << 24) + 1, "larger blocks"),
])
def test_lane_blocks_are_checked_per_lane(lane, tokens, why):
    with pytest.raises(ValueError, match=f"^capacity_tokens: lane .*{why}"):
        check_lane_blocks([LaneSpec.parse(lane)], tokens)
    check_lane_blocks([LaneSpec.parse(lane)], 16)


def test_kv_bytes_per_token():
    # llama-2-7b: 2 (K, V) * 32 layers * 32 heads * 128 dims * 2 bytes = 512 KiB
    assert model_preset("llama-2-7b").kv_bytes_per_token == 524288


@pytest.mark.parametrize("kw, field", [
    (dict(preset="nope"), "preset"),
    (dict(num_requests=0), "num_requests"),
    (dict(rate=0), "rate"),
    (dict(rate=-1.0), "rate"),
    (dict(arrival="uniform"), "arrival"),
    (dict(burstiness=0), "burstiness"),
    (dict(max_seq_len=-5), "max_seq_len"),
    (dict(prefix_share=1.5), "prefix_share"),
    (dict(prefix_share=-0.1), "prefix_share"),
    (dict(prefix_tokens=-1), "prefix_tokens"),
    (dict(prefix_tokens=4096), "prefix_tokens"),
    (dict(prefix_groups=0), "prefix_groups"),
])
def test_workload_config_names_the_bad_field(kw, field):
    with pytest.raises(ValueError, match=f"^{field}"):
        WorkloadConfig(**kw)


@pytest.mark.parametrize("kw, field", [
    (dict(max_num_seqs=0), "max_num_seqs"),
    (dict(max_batched_tokens=0), "max_batched_tokens"),
    (dict(watermark=1.0), "watermark"),
    (dict(step_ms=0), "step_ms"),
    (dict(max_seq_len=1), "max_seq_len"),
])
def test_engine_config_names_the_bad_field(kw, field):
    with pytest.raises(ValueError, match=f"^{field}"):
        EngineConfig(**kw)


@pytest.mark.parametrize("kw, field", [
    (dict(allocator="slab"), "allocator"),
    (dict(block_size=0), "block_size"),
    (dict(allocator="contiguous", placement="worst-fit"), "placement"),
    (dict(allocator="contiguous", reserve="half"), "reserve"),
    (dict(allocator="contiguous", prefix_caching=True), "prefix_caching"),
])
def test_lane_spec_names_the_bad_field(kw, field):
    with pytest.raises(ValueError, match=f"^{field}"):
        LaneSpec(**kw)


@pytest.mark.parametrize("kw, field", [
    (dict(num_layers=0), "num_layers"),
    (dict(num_kv_heads=3), "num_heads"),
    (dict(dtype="int4"), "dtype"),
])
def test_model_shape_names_the_bad_field(kw, field):
    base = dict(name="m", num_layers=2, num_heads=4, num_kv_heads=2, head_dim=8)
    with pytest.raises(ValueError, match=f"^{field}"):
        ModelShape(**(base | kw))


def test_unknown_model_preset_raises():
    with pytest.raises(ValueError, match="^model"):
        model_preset("gpt-5")


@pytest.mark.parametrize("text, label", [
    ("paged:16", "paged:16"),
    ("paged:8:prefix", "paged:8:prefix"),
    ("contiguous", "contiguous:first-fit:max"),
    ("contiguous:buddy:pow2", "contiguous:buddy:pow2"),
])
def test_lane_spec_text_round_trips_through_its_label(text, label):
    spec = LaneSpec.parse(text)
    assert spec.label == label
    assert LaneSpec.parse(spec.label) == spec


@pytest.mark.parametrize("text", ["paged", "paged:x", "paged:16:cache", "slab:1",
                                  "contiguous:a:b:c", "contiguous:worst-fit"])
def test_bad_lane_text_raises_value_error(text):
    with pytest.raises(ValueError):
        LaneSpec.parse(text)


def test_configs_are_frozen():
    c = EngineConfig()
    with pytest.raises(AttributeError):
        c.max_num_seqs = 3  # type: ignore[misc]


def test_default_rate_is_all_at_once():
    assert math.isinf(WorkloadConfig().rate)


@pytest.mark.parametrize("name, words", [
    ("paged:16", "paged, blocks of 16 slots: any free block serves"),
    ("paged:16#2", "paged, blocks of 16 slots: any free block serves (lane #2 with this setting)"),
    ("paged:32:prefix", "paged, blocks of 32 slots, prefix caching: any free block serves"),
    ("contiguous:buddy:pow2#3", "contiguous, buddy placement, reserves pow2 length up front: "
                                "needs one free range (lane #3 with this setting)"),
    ("not-a-lane", "not-a-lane"),
])
def test_lane_caption_names_the_spec_and_the_copy(name, words):
    assert lane_caption(name) == words
