"""Huge integers and dates outside the nanosecond clock, in every trace format and column: one
TraceError naming line and column, or (--skip-bad-rows) a counted skip; never OverflowError
and never a silently wrapped value (issue 26 item 6)."""
from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvviz.core.errors import TraceError
from kvviz.core.workload import Workload
from kvviz.traces import TraceOptions, read_trace_bytes

# per format: header (CSV) or None (JSONL), three good rows, and the columns a number goes in
CSV = {
    "azure": ("TIMESTAMP,ContextTokens,GeneratedTokens",
              [("2023-11-16 18:15:46.6805900", 374, 44), ("2023-11-16 18:15:50.9951690", 396, 9),
               ("2023-11-16 18:15:51.0000001", 879, 20)],
              ("ContextTokens", "GeneratedTokens")),
    "burstgpt": ("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type",
                 [(0, "m", 5, 5, 10, "x"), (1, "m", 6, 6, 12, "x"), (2, "m", 7, 7, 14, "x")],
                 ("Timestamp", "Request tokens", "Response tokens")),
    "kvviz-csv": ("arrival_s,prompt_tokens,output_tokens,prefix_group",
                  [(0.0, 5, 5, -1), (1.0, 6, 6, 0), (2.0, 7, 7, 1)],
                  ("arrival_s", "prompt_tokens", "output_tokens", "prefix_group")),
}
JSONL = {
    "mooncake": ([{"timestamp": 0, "input_length": 5, "output_length": 5, "hash_ids": [1]},
                  {"timestamp": 10, "input_length": 6, "output_length": 6, "hash_ids": [2]},
                  {"timestamp": 20, "input_length": 7, "output_length": 7, "hash_ids": [3]}],
                 ("timestamp", "input_length", "output_length", "hash_ids")),
    "kvviz-jsonl": ([{"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 5},
                     {"arrival_s": 1, "prompt_tokens": 6, "output_tokens": 6},
                     {"arrival_s": 2, "prompt_tokens": 7, "output_tokens": 7}],
                    ("arrival_s", "prompt_tokens", "output_tokens", "prefix_group")),
}
CASES = [(f, c) for f, (_, _, cols) in CSV.items() for c in cols] + [
    (f, c) for f, (_, cols) in JSONL.items() for c in cols]


def _trace(fmt: str, column: str, value: str) -> bytes:
    """The format's three rows with `value` (text as written) in row 2's `column`."""
    if fmt in CSV:
        header, rows, _ = CSV[fmt]
        names = header.split(",")
        out = [header]
        for i, row in enumerate(rows):
            cells = [str(v) for v in row]
            if i == 1:
                cells[names.index(column)] = value
            out.append(",".join(cells))
        return ("\n".join(out) + "\n").encode()
    rows, _ = JSONL[fmt]
    lines = []
    for i, row in enumerate(rows):
        text = json.dumps(row)
        if i == 1:
            cell = f"[{value}]" if column == "hash_ids" else value
            obj = {k: ("@" if k == column else v) for k, v in row.items()}
            if column not in obj:
                obj[column] = "@"
            text = json.dumps(obj).replace('"@"', cell)
        lines.append(text)
    return ("\n".join(lines) + "\n").encode()


TIMES = ("TIMESTAMP", "Timestamp", "arrival_s", "timestamp")


def _one_error_or_counted(raw: bytes, column: str, *, must_fail: bool) -> None:
    """A workload or one TraceError naming a line and a column of the format; with
    skip_bad_rows, a workload that counts every row it did not keep."""
    try:
        read_trace_bytes(raw, "f.trace")
        assert not must_fail, "read without an error"
    except TraceError as exc:
        msg = str(exc)
        assert re.match(r"f\.trace: line [234]: column '[A-Za-z_ ]+': ", msg), msg
        if must_fail:
            assert re.match(rf"f\.trace: line [234]: column '{column}'", msg), msg
    w, info = read_trace_bytes(raw, "f.trace", TraceOptions(skip_bad_rows=True))
    assert isinstance(w, Workload)
    assert info.rows_read == 3 and info.rows_kept + info.bad_rows + info.outside_rows == 3, info
    if must_fail:
        assert info.bad_rows == 1 and info.rows_kept == 2, info


@settings(max_examples=80, deadline=None)
@given(case=st.sampled_from(CASES), digits=st.integers(20, 4000), neg=st.booleans())
def test_a_huge_integer_in_any_column_is_one_error_or_a_counted_skip(case, digits, neg):
    fmt, column = case
    raw = _trace(fmt, column, ("-" if neg else "") + "9" * digits)
    # a token count or block id that large is out of range; so is a negative time (or one
    # that makes the next row go back), and a time past float range (309 digits and more).
    # Only kvviz's own formats (rows in any order) read a finite time of 10^20 s and up.
    finite_late = column in TIMES and fmt.startswith("kvviz") and not neg and digits < 309
    _one_error_or_counted(raw, column, must_fail=not finite_late)


def test_400_digit_jsonl_timestamps_name_line_and_column():
    raw = _trace("kvviz-jsonl", "arrival_s", "9" * 400)
    with pytest.raises(TraceError, match=r"line 2: column 'arrival_s': out of range"):
        read_trace_bytes(raw, "f")


@settings(max_examples=40, deadline=None)
@given(year=st.one_of(st.integers(2263, 999_999_999), st.integers(1, 1676)),
       md=st.sampled_from(["01-01 00:00:00.0000000", "11-16 18:15:46.6805900"]))
def test_an_azure_date_outside_1677_2262_is_one_error_never_a_wrapped_time(year, md):
    raw = _trace("azure", "TIMESTAMP", f"{year:04d}-{md}")
    with pytest.raises(TraceError) as exc:
        read_trace_bytes(raw, "f.trace")
    assert str(exc.value).startswith("f.trace: line 3: column 'TIMESTAMP'"), exc.value
    assert "1677-09-21 to 2262-04-11" in str(exc.value)
    w, info = read_trace_bytes(raw, "f.trace", TraceOptions(skip_bad_rows=True))
    assert info.bad_rows == 1 and info.rows_kept == 2
    assert w.arrival_s.tolist() == pytest.approx([0.0, 51.0000001 - 46.68059])


@pytest.mark.parametrize("stamp", ["1677-09-21 00:12:43.145224193", "2262-04-11 23:47:16.8547758"])
def test_the_edges_of_the_nanosecond_clock_still_read(stamp):
    rows = [(stamp, 5, 5)]
    raw = ("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "".join(
        f"{t},{p},{o}\n" for t, p, o in rows)).encode()
    w, info = read_trace_bytes(raw, "f")
    assert info.rows_kept == 1 and w.arrival_s.tolist() == [0.0]


def test_collect_trace_with_a_400_digit_timestamp_skips_it_or_exits_2(tmp_path, capsys):
    from kvviz.commands.cli import main

    trace = tmp_path / "t.jsonl"
    trace.write_bytes(_trace("kvviz-jsonl", "arrival_s", "9" * 400))
    fast = ["--mode", "sim", "--quiet", "--steps-per-s", "0", "--hz", "20"]
    out = tmp_path / "r.db"
    assert main(["collect", *fast, "--out", str(out), "--trace", str(trace)]) == 2
    assert "line 2: column 'arrival_s'" in capsys.readouterr().err and not out.exists()
    assert main(["collect", *fast, "--out", str(out), "--trace", str(trace),
                 "--skip-bad-rows"]) == 0
    assert out.exists()
