"""Unusable rows: one error naming file, line and column, or counted under skip_bad_rows."""
from __future__ import annotations

import pytest

from kvviz.core.errors import TraceError
from kvviz.traces import TraceOptions, read_trace_bytes
from tests.traces import samples as S

ROWS = S.AZURE_ROWS


@pytest.mark.parametrize("raw, line, column", [
    (S.azure([ROWS[0], (ROWS[1][0], -5, 3), ROWS[2]]), 3, "ContextTokens"),
    (S.azure([ROWS[0], (ROWS[1][0], 5, 0), ROWS[2]]), 3, "GeneratedTokens"),
    (S.azure([ROWS[0], (ROWS[1][0], "many", 3), ROWS[2]]), 3, "ContextTokens"),
    (S.azure([ROWS[0], ("yesterday", 5, 3), ROWS[2]]), 3, "TIMESTAMP"),
    (S.azure([ROWS[1], ROWS[0], ROWS[2]]), 3, "TIMESTAMP"),  # goes backwards
    (S.burstgpt([(0, "ChatGPT", 1, 1), (1, "ChatGPT", 3, -1)]), 3, "Response tokens"),
    (S.burstgpt([(0, "ChatGPT", 1, 1), (1, "ChatGPT", 2.5, 1)]), 3, "Request tokens"),
    (S.mooncake([(0, 1, 1, []), (1, 0, 1, [])]), 2, "input_length"),
    (S.mooncake([(5, 1, 1, []), (1, 1, 1, [])]), 2, "timestamp"),
    (S.mooncake([(0, 600, 1, [1, "x"])]), 1, "hash_ids"),
])
def test_a_bad_row_is_one_error_naming_file_line_and_column(raw, line, column):
    with pytest.raises(TraceError) as exc:
        read_trace_bytes(raw, "f.trace")
    msg = str(exc.value)
    assert msg.startswith(f"f.trace: line {line}: column '{column}'"), msg
    assert "--skip-bad-rows" in msg


def test_skip_bad_rows_counts_every_row():
    raw = S.azure([ROWS[0], (ROWS[1][0], -5, 3), ("later", 1, 1), ROWS[2]])
    w, info = read_trace_bytes(raw, "f", TraceOptions(skip_bad_rows=True))
    assert info.rows_read == 4 and info.bad_rows == 2 and info.rows_kept == 2
    assert w.prompt.tolist() == [374, 879]


def test_skipping_a_backwards_row_keeps_later_rows_in_order():
    raw = S.burstgpt([(0, "m", 1, 1), (10, "m", 2, 1), (5, "m", 3, 1), (11, "m", 4, 1)])
    w, info = read_trace_bytes(raw, "f", TraceOptions(skip_bad_rows=True))
    assert w.prompt.tolist() == [1, 2, 4] and info.bad_rows == 1


def test_the_first_bad_line_is_named_when_conversion_and_range_errors_mix():
    raw = S.burstgpt([(0, "m", 1, 1), (1, "m", 0, 1), (2, "m", 7, 1)]).replace(b",7,", b",x,")
    with pytest.raises(TraceError, match="line 3: column 'Request tokens'"):
        read_trace_bytes(raw, "f")


def test_a_row_with_too_few_fields_names_the_missing_column():
    raw = S.AZURE_HEADER.encode() + b"\n2023-11-16 18:15:46.6805900,374\n"
    with pytest.raises(TraceError, match="line 2: column 'GeneratedTokens'"):
        read_trace_bytes(raw, "f")


def test_nothing_kept_is_an_error_with_the_counts():
    raw = S.burstgpt([(0, "m", 1, 0)])
    with pytest.raises(TraceError, match="no requests kept.*1 failed"):
        read_trace_bytes(raw, "f")
