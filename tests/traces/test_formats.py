"""Each public format loads as downloaded, with its quirks."""
from __future__ import annotations

import numpy as np
import pytest

from kvviz.core.errors import TraceError
from kvviz.traces import TraceOptions, read_trace, read_trace_bytes
from tests.traces import samples as S


def test_azure_arrivals_are_seconds_since_the_first_row_to_100ns():
    w, info = read_trace_bytes(S.azure(S.AZURE_ROWS), "a.csv")
    assert info.fmt == "azure"
    assert w.arrival_s.tolist() == pytest.approx([0.0, 4.314579, 4.3194101], abs=1e-9)
    assert w.prompt.tolist() == [374, 396, 879] and w.output.tolist() == [44, 109, 20]


def test_azure_with_bom_crlf_and_blank_lines_loads_the_same():
    plain, _ = read_trace_bytes(S.azure(S.AZURE_ROWS), "a.csv")
    raw = S.azure(S.AZURE_ROWS, bom=True, crlf=True).replace(b"\r\n2023-11-16 18:15:50",
                                                               b"\r\n\r\n\r\n2023-11-16 18:15:50")
    odd, info = read_trace_bytes(raw, "a.csv")
    assert info.fmt == "azure" and info.rows_read == 3
    assert np.array_equal(plain.arrival_s, odd.arrival_s)
    assert np.array_equal(plain.prompt, odd.prompt)


def test_burstgpt_zero_response_rows_are_failures_counted_not_kept():
    raw = S.burstgpt([(5, "ChatGPT", 472, 18), (45, "GPT-4", 1087, 0), (46, "GPT-4", 100, 10)])
    w, info = read_trace_bytes(raw, "b.csv")
    assert info.fmt == "burstgpt" and info.failed_rows == 1 and info.rows_kept == 2
    assert w.arrival_s.tolist() == [0.0, 41.0] and w.prompt.tolist() == [472, 100]


def test_burstgpt_quoted_fields_and_model_filter():
    raw = S.burstgpt([(0, "ChatGPT", 10, 1), (1, "GPT-4", 20, 2), (2, "ChatGPT", 30, 3)],
                     quote=True)
    w, info = read_trace_bytes(raw, "b.csv", TraceOptions(model_filter="ChatGPT"))
    assert w.prompt.tolist() == [10, 30] and info.filtered_rows == 1


def test_mooncake_carries_hash_chains_of_512_token_blocks():
    raw = S.mooncake([(0, 1100, 5, [7, 8, 9]), (2500, 600, 3, [7, 10])])
    w, info = read_trace_bytes(raw, "m.jsonl")
    assert info.fmt == "mooncake" and info.hash_block_tokens == 512
    assert w.arrival_s.tolist() == [0.0, 2.5]
    assert w.chain(0).tolist() == [7, 8, 9] and w.chain(1).tolist() == [7, 10]


def test_mooncake_more_block_ids_than_prompt_blocks_is_a_bad_row():
    raw = S.mooncake([(0, 512, 5, [1, 2])])
    with pytest.raises(TraceError, match=r"line 1: column 'hash_ids'"):
        read_trace_bytes(raw, "m.jsonl")


def test_kvviz_csv_still_loads_unchanged():
    w, info = read_trace_bytes(b"arrival_s,prompt_tokens,output_tokens\n2,5,5\n1,6,6\n", "k")
    assert info.fmt == "kvviz-csv" and w.arrival_s.tolist() == [1, 2]


@pytest.mark.parametrize("fmt, raw", [
    ("azure", S.azure(S.AZURE_ROWS)),
    ("burstgpt", S.burstgpt([(0, "ChatGPT", 1, 1)])),
    ("mooncake", S.mooncake([(0, 1, 1, [])])),
    ("kvviz-csv", S.kvviz_csv([(0.0, 1, 1)])),
    ("kvviz-jsonl", b'{"arrival_s": 0, "prompt_tokens": 1, "output_tokens": 1}\n'),
])
def test_format_is_detected_from_the_first_line(fmt, raw):
    assert read_trace_bytes(raw, "t")[1].fmt == fmt


def test_forcing_a_format_checks_its_header():
    with pytest.raises(TraceError, match="header lacks arrival_s"):
        read_trace_bytes(S.azure(S.AZURE_ROWS), "a.csv", TraceOptions(fmt="kvviz-csv"))


def test_unknown_header_names_the_known_formats():
    with pytest.raises(TraceError, match="t: line 1: unknown trace format.*Azure"):
        read_trace_bytes(b"when,how_many\n1,2\n", "t")


def test_reading_from_a_file_equals_reading_bytes(tmp_path):
    p = tmp_path / "a.csv"
    p.write_bytes(S.azure(S.AZURE_ROWS))
    a, _ = read_trace(p)
    b, _ = read_trace_bytes(p.read_bytes(), str(p))
    assert np.array_equal(a.arrival_s, b.arrival_s)


def test_jsonl_fast_and_line_by_line_paths_agree():
    rows = [(13 * i + 7, 600 + 41 * i, 1 + i, [i % 3, 10 + i]) for i in range(20)]
    clean, _ = read_trace_bytes(S.mooncake(rows), "m.jsonl")  # whole-chunk columns
    slow, info = read_trace_bytes(S.mooncake(rows) + b'{"timestamp": "late"}\n', "m.jsonl",
                                  TraceOptions(skip_bad_rows=True))  # one bad line: per line
    assert info.bad_rows == 1
    for k in ("arrival_s", "prompt", "output", "chain_ptr", "chain_ids"):
        assert np.array_equal(getattr(clean, k), getattr(slow, k)), k
