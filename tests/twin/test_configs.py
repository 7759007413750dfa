"""Alternatives: lists crossed, memory kept when only the block size changes, clear errors."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvviz.core.config import model_preset
from kvviz.core.errors import KvvizError
from kvviz.twin.configs import MAX_CONFIGS, PARSERS, alternatives
from kvviz.twin.settings import NodeSettings

M = model_preset("llama-3-8b")
BASE = NodeSettings(block_size=16, num_gpu_blocks=1025)


def test_the_cross_product_varies_every_listed_knob():
    alt = alternatives({"block_size": "16,32", "max_num_seqs": "8,64,256",
                        "prefix_caching": "on,off"})
    out = alt.expand(BASE, M)
    assert len(out) == alt.count() == 12
    assert {(s.block_size, s.max_num_seqs, s.enable_prefix_caching) for s in out} == {
        (b, q, p) for b in (16, 32) for q in (8, 64, 256) for p in (True, False)}


def test_a_block_size_alone_keeps_the_node_kv_memory():
    (s32,) = alternatives({"block_size": "32"}).expand(BASE, M)
    assert s32.num_gpu_blocks == 1025 * 16 // 32
    assert s32.kv_bytes(M) <= BASE.kv_bytes(M) < s32.kv_bytes(M) + 32 * M.kv_bytes_per_token


def test_kv_memory_as_a_multiple_or_bytes():
    x, b = alternatives({"kv_memory": "2x,1GiB"}).expand(BASE, M)
    assert x.num_gpu_blocks == 2050
    assert b.num_gpu_blocks == 2**30 // (16 * M.kv_bytes_per_token)


def test_num_blocks_are_vllm_counts():
    (s,) = alternatives({"num_gpu_blocks": "200"}).expand(BASE, M)
    assert s.num_gpu_blocks == 200 and s.usable_blocks == 199


def test_a_named_set_and_a_flag_beside_it():
    assert alternatives({}, "sizing").count() == 12
    alt = alternatives({"block_size": "64"}, "sizing")
    assert alt.block_size == (64,) and alt.count() == 4


@pytest.mark.parametrize("texts, named, words", [
    ({"block_size": "16,,32"}, None, "--block-size"),
    ({"block_size": "0"}, None, "--block-size: '0': must be in"),
    ({"watermark": "1.0"}, None, "--watermark"),
    ({"prefix_caching": "maybe"}, None, "say on or off"),
    ({"kv_memory": "12 apples"}, None, "neither a multiple"),
    ({"kv_memory": "0x"}, None, "--kv-memory"),
    ({"kv_memory": "1x", "num_gpu_blocks": "9"}, None, "give one"),
    ({}, "nope", "--set: 'nope'"),
])
def test_bad_lists_name_the_flag(texts, named, words):
    with pytest.raises(KvvizError, match=words.replace("(", r"\(")):
        alternatives(texts, named).expand(BASE, M)


def test_too_many_configurations_are_refused_before_any_run():
    alt = alternatives({"block_size": ",".join(str(16 * k) for k in range(1, 17)),
                        "max_num_seqs": ",".join(str(k) for k in range(1, 18))})
    assert alt.count() > MAX_CONFIGS
    with pytest.raises(KvvizError, match=f"at most {MAX_CONFIGS}"):
        alt.expand(BASE, M)


def test_memory_below_two_blocks_is_refused_naming_the_flag():
    with pytest.raises(KvvizError, match="--kv-memory 0.001x: block size 16"):
        alternatives({"kv_memory": "0.001x"}).expand(BASE, M)


_ITEM = st.sampled_from(["16", "0", "-1", "1.5", "1e3", "nan", "inf", "2x", "0x", "1e400x",
                         "8GiB", "1e300", "on", "off", "", " ", "\x1b[31m", "9" * 40, "１２",
                         "0.01", "16777217"])
_TEXT = st.lists(_ITEM, max_size=4).map(",".join)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(texts=st.dictionaries(st.sampled_from(sorted(PARSERS)), _TEXT, max_size=4),
       named=st.sampled_from([None, "sizing", "nope"]))
def test_any_text_is_alternatives_or_one_clear_error(texts, named):
    """The dashboard's form hands these texts over as typed: a result or KvvizError."""
    try:
        out = alternatives(texts, named).expand(BASE, M)
    except KvvizError as exc:
        assert "\n" not in str(exc) and str(exc)
        return
    assert all(isinstance(s, NodeSettings) for s in out) and len(out) <= MAX_CONFIGS
