"""Trace files: CSV and JSONL round trips; malformed rows name file, line and field."""
from __future__ import annotations

import numpy as np
import pytest

from kvviz.core.config import WorkloadConfig
from kvviz.core.errors import TraceError
from kvviz.core.workload import dump_trace, generate
from kvviz.traces import load_trace, parse_trace


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_trace_round_trip(tmp_path, suffix):
    w = generate(WorkloadConfig(num_requests=300, rate=3.0, prefix_share=0.4, prefix_tokens=32,
                                seed=4))
    path = tmp_path / f"t{suffix}"
    dump_trace(w, path)
    back = load_trace(path, prefix_tokens=32)
    for k in ("arrival_s", "prompt", "output", "prefix_group"):
        assert np.array_equal(getattr(back, k), getattr(w, k)), k
    assert back.prefix_tokens == 32


def test_rows_are_sorted_by_arrival():
    w = parse_trace("arrival_s,prompt_tokens,output_tokens\n2,5,5\n1,6,6\n")
    assert w.arrival_s.tolist() == [1, 2] and w.prompt.tolist() == [6, 5]


def test_missing_prefix_group_means_none():
    w = parse_trace("arrival_s,prompt_tokens,output_tokens\n0,5,5\n")
    assert w.prefix_group.tolist() == [-1] and w.prefix_tokens == 0


def test_trace_lengths_are_clipped_to_max_seq_len():
    w = parse_trace('{"arrival_s": 0, "prompt_tokens": 90, "output_tokens": 90}',
                    max_seq_len=100)
    assert int(w.final_len[0]) == 100


@pytest.mark.parametrize("text, line, field", [
    ("arrival_s,prompt_tokens,output_tokens\n0,5,5\n1,x,5\n", 3, "prompt_tokens"),
    ("arrival_s,prompt_tokens,output_tokens\n0,5,5\n1,5,0\n", 3, "output_tokens"),
    ("arrival_s,prompt_tokens,output_tokens\n-1,5,5\n", 2, "arrival_s"),
    ("arrival_s,prompt_tokens,output_tokens\nnan,5,5\n", 2, "arrival_s"),
    ("arrival_s,prompt_tokens,output_tokens\n0,5,\n", 2, "output_tokens"),
    ("arrival_s,prompt_tokens,output_tokens,prefix_group\n0,5,5,-2\n", 2, "prefix_group"),
    ('{"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 5}\n'
     '{"arrival_s": 1, "output_tokens": 5}\n', 2, "prompt_tokens"),
    ('{"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 5}\n\n'
     '{"arrival_s": 1, "prompt_tokens": -3, "output_tokens": 5}\n', 3, "prompt_tokens"),
])
def test_malformed_rows_name_file_line_and_field(text, line, field):
    with pytest.raises(TraceError) as exc:
        parse_trace(text, "my.trace")
    msg = str(exc.value)
    assert msg.startswith(f"my.trace: line {line}:"), msg
    assert field in msg


def test_csv_header_without_a_required_field_names_it():
    with pytest.raises(TraceError, match="my.csv: line 1: .*output_tokens"):
        parse_trace("arrival_s,prompt_tokens\n0,5\n", "my.csv")


def test_invalid_json_names_the_line():
    with pytest.raises(TraceError, match="t: line 2: not valid JSON"):
        parse_trace('{"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 5}\n{oops\n', "t")


def test_empty_trace_is_an_error():
    with pytest.raises(TraceError, match="no requests"):
        parse_trace("arrival_s,prompt_tokens,output_tokens\n", "t")


def test_missing_file_is_a_trace_error(tmp_path):
    with pytest.raises(TraceError, match="no such file"):
        load_trace(tmp_path / "nope.csv")


def test_trace_error_is_a_value_error():
    assert issubclass(TraceError, ValueError)
