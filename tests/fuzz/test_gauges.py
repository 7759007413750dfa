"""Round 3, item 5: gauges are checked as read (kvviz/node/gauges.py).

Before: a usage of -7.5 read "-750.0%" (attach status, the Node page), 1e308 "inf%", negative
num_gpu_blocks and num_running were stored, and cache_config_info given twice mixed
block_size from one copy with num_gpu_blocks from the other.
"""
from __future__ import annotations

import math

import hypothesis.strategies as hs
from hypothesis import given, settings

from kvviz.commands.scrape import format_line
from kvviz.node.gauges import percent
from kvviz.node.promtext import sample_from_text
from kvviz.viz.node import headlines

INFO = 'vllm:cache_config_info{block_size="%s",engine="0",num_gpu_blocks="%s"} 1.0\n'


def body(usage="0.5", running="3", waiting="1", blocks="101", bs="16", extra="") -> str:
    return ("# TYPE vllm:kv_cache_usage_perc gauge\n"
            f'vllm:kv_cache_usage_perc{{engine="0"}} {usage}\n'
            "# TYPE vllm:num_requests_running gauge\n"
            f'vllm:num_requests_running{{engine="0"}} {running}\n'
            "# TYPE vllm:num_requests_waiting gauge\n"
            f'vllm:num_requests_waiting{{engine="0"}} {waiting}\n'
            "# TYPE vllm:cache_config_info gauge\n" + INFO % (bs, blocks) + extra)


def read(text: str):
    return sample_from_text(text, url="http://n/metrics", time=0.0)


def test_a_valid_body_reads_as_before():
    s = read(body())
    assert s.kv_usage == 0.5 and s.num_running == 3 and s.num_gpu_blocks == 101
    assert s.block_size == 16 and s.message == ""


def test_a_negative_usage_is_the_nodes_error_not_minus_750_percent():
    s = read(body(usage="-7.5"))
    assert s.ok and s.kv_usage is None and s.kv_used_tokens is None
    assert "kv_cache_usage_perc" in s.message and "-7.5" in s.message
    line = format_line(s)
    assert "-750" not in line and "outside their meaning" in line
    assert s.num_running == 3  # the other gauges are still read


def test_a_huge_usage_is_never_inf_percent():
    s = read(body(usage="1e308"))
    assert s.kv_usage is None and "inf" not in format_line(s).split(";")[0]


def test_negative_counts_and_blocks_are_flagged_not_stored():
    s = read(body(running="-4", blocks="-100"))
    assert s.num_running is None and s.num_gpu_blocks is None and s.kv_capacity_tokens is None
    assert "num_requests_running" in s.message and "num_gpu_blocks" in s.message


def test_a_zero_block_size_is_flagged():
    s = read(body(bs="0"))
    assert s.block_size is None and "block_size" in s.message


def test_a_series_given_twice_is_one_warning_never_a_mix():
    s = read(body(blocks="101", bs="16", extra=INFO % ("32", "999")))
    assert (s.block_size, s.num_gpu_blocks) == (16, 101)
    assert s.message.count("more than once") == 1 and "cache_config_info" in s.message
    s = read(body(extra='vllm:num_requests_running{engine="0"} 77\n'))
    assert s.num_running == 3 and "num_requests_running" in s.message


def test_stored_values_outside_their_meaning_display_as_invalid():
    heads = {h.label: h.value for h in headlines({"kv_usage": -7.5, "prefix_hit_rate": 1e308})}
    assert heads["KV usage"].startswith("invalid") and "%" not in heads["KV usage"]
    assert "inf" not in heads["Prefix hit rate (since start)"].replace("invalid", "")


VALUES = hs.sampled_from(["nan", "+Inf", "-Inf", "-1", "-7.5", "0", "0.5", "1", "1.0000001",
                          "1e308", "-1e308", "3", "9223372036854775808", "1e19"])


@settings(max_examples=300, deadline=None)
@given(usage=VALUES, running=VALUES, waiting=VALUES, blocks=VALUES, bs=VALUES)
def test_whatever_the_gauges_say_only_meaningful_values_are_data(usage, running, waiting,
                                                                 blocks, bs):
    s = read(body(usage, running, waiting, blocks, bs))
    assert s.kv_usage is None or 0.0 <= s.kv_usage <= 1.0
    for v in (s.num_running, s.num_waiting, s.num_gpu_blocks, s.kv_capacity_tokens,
              s.kv_used_tokens):
        assert v is None or (math.isfinite(v) and v >= 0)
    assert s.block_size is None or s.block_size >= 1
    shown = format_line(s).split("; the node")[0]
    kv = shown.split(" kv ")[1].split()[0]
    assert (kv == "-" or not kv.startswith("-")) and "inf%" not in shown
    bad = [x for x in (usage, running, waiting, blocks, bs)
           if not math.isfinite(float(x)) or float(x) < 0]
    if bad:
        assert "outside their meaning" in s.message


@given(hs.one_of(hs.none(), hs.floats(), hs.integers(-10**30, 10**30)))
def test_percent_is_a_percentage_of_a_fraction_or_says_invalid(x):
    text = percent(x)
    if x is None:
        assert text == "-"
    elif math.isfinite(x) and 0 <= x <= 1:
        assert text.endswith("%") and not text.startswith("-")
    else:
        assert text.startswith("invalid (")


def test_stored_values_outside_their_meaning_are_not_drawn():
    import pandas as pd

    from kvviz.viz.node import node_figure

    df = pd.DataFrame({"t": [0.0, 1.0, 2.0], "status": ["ok"] * 3,
                       "kv_usage": [0.5, -7.5, 1e308], "num_running": [3, -4, 2]})
    fig = node_figure(df)
    usage = next(tr for tr in fig.data if tr.name == "KV usage %")
    running = next(tr for tr in fig.data if tr.name == "running")
    assert [y for y in usage.y if y == y] == [50.0]
    assert [y for y in running.y if y == y] == [3.0, 2.0]
