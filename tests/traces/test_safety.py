"""Bounded parsing: regular files only, no endless lines, no recursion bombs, chunk-proof."""
from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvviz.core.errors import TraceError
from kvviz.traces import chunks, read_trace, read_trace_bytes
from kvviz.traces.options import MAX_LINE_BYTES
from tests.traces import samples as S


def test_a_directory_is_not_a_trace(tmp_path):
    with pytest.raises(TraceError, match="expected a regular file"):
        read_trace(tmp_path)


def test_a_fifo_is_refused_without_blocking(tmp_path):
    p = tmp_path / "pipe"
    os.mkfifo(p)
    with pytest.raises(TraceError, match="expected a regular file"):
        read_trace(p)


def test_an_endless_line_is_refused():
    raw = S.AZURE_HEADER.encode() + b"\n" + b"9" * (MAX_LINE_BYTES + 10)
    with pytest.raises(TraceError, match="longer than"):
        read_trace_bytes(raw, "f")


def test_an_overlong_line_between_good_ones_is_named():
    raw = S.azure(S.AZURE_ROWS) + b"x" * (MAX_LINE_BYTES + 5) + b"\n" + S.azure(S.AZURE_ROWS)
    with pytest.raises(TraceError, match="f: line 5: longer than"):
        read_trace_bytes(raw, "f")


def test_deeply_nested_json_is_one_error():
    raw = S.mooncake([(0, 1, 1, [])]) + b'{"timestamp": 1, "input_length": ' + b"[" * 200_000 \
        + b"\n"
    with pytest.raises(TraceError, match="line 2"):
        read_trace_bytes(raw, "f")


def test_binary_data_is_refused():
    with pytest.raises(TraceError, match="not UTF-8|NUL"):
        read_trace_bytes(S.AZURE_HEADER.encode() + b"\n\x00\xff\xfe", "f")


def test_tiny_chunks_give_the_same_rows_and_line_numbers(monkeypatch):
    rows = [(f"2023-11-16 18:{m:02d}:{s:02d}.1234567", 10 + m, 1 + s)
            for m in range(5) for s in range(0, 60, 7)]
    raw = S.azure(rows, crlf=True)
    whole, _ = read_trace_bytes(raw, "f")
    monkeypatch.setattr(chunks, "CHUNK_BYTES", 37)
    small, _ = read_trace_bytes(raw, "f")
    assert np.array_equal(whole.arrival_s, small.arrival_s)
    bad = raw.replace(b",14,43", b",14,-43")
    with pytest.raises(TraceError, match="line 44: column 'GeneratedTokens'"):
        read_trace_bytes(bad, "f")


@settings(max_examples=60, deadline=None)
@given(st.sampled_from([S.azure(S.AZURE_ROWS, bom=True, crlf=True),
                        S.burstgpt([(0, "ChatGPT", 3, 0), (1, "GPT-4", 5, 6)], quote=True),
                        S.mooncake([(0, 600, 5, [1, 2]), (10, 700, 2, [1, 3])]),
                        S.kvviz_csv([(0.5, 3, 4)])]),
       st.integers(0, 400), st.binary(max_size=8), st.booleans())
def test_mutated_traces_give_a_result_or_one_trace_error(raw, at, junk, skip):
    from kvviz.traces import TraceOptions

    data = raw[:at] + junk + raw[at:]
    try:
        w, info = read_trace_bytes(data, "f", TraceOptions(skip_bad_rows=skip))
    except TraceError as exc:
        assert str(exc).startswith("f: ")
        return
    assert len(w) == info.rows_kept >= 1
    assert (w.prompt >= 1).all() and (np.diff(w.arrival_s) >= 0).all()
