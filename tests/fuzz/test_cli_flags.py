"""Numeric flags: finite, within the range stated in --help, else one error line and exit 2."""
from __future__ import annotations

import argparse

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvviz.commands.cli import main
from kvviz.core import limits as at


def _one_error(capsys, argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"kvviz {argv[0]}") and ": error: " in err
    return lines[0]


@pytest.mark.parametrize("argv, needle", [
    (["simulate", "--capacity-tokens", "1000000000000"], "--capacity-tokens"),
    (["simulate", "--max-seq-len", "99999999999999999999"], "--max-seq-len"),
    (["simulate", "--rate", "nan"], "--rate"),
    (["simulate", "--step-ms", "inf"], "--step-ms"),
    (["simulate", "--watermark", "1"], "--watermark"),
    (["simulate", "--seed", "-1"], "--seed"),
    (["simulate", "--lane", "paged:99999999999999"], "block_size"),
    (["simulate", "--lane", "contiguous", "--capacity-tokens", "268435456"], "cells of 1"),
    (["simulate", "--lane", "paged:1", "--capacity-tokens", "1073741824"], "larger blocks"),
    (["collect", "--capacity-tokens", "1073741824"], "contiguous:first-fit:pow2"),
    (["collect", "--blockmap-budget-mb", "inf"], "--blockmap-budget-mb"),
    (["collect", "--duration", "nan"], "--duration"),
    (["collect", "--metrics-port", "70000"], "--metrics-port"),
    (["collect", "--prefix-sharing", "1.5"], "--prefix-sharing"),
    (["scrape", "localhost:1", "--timeout", "inf"], "--timeout"),
    (["scrape", "localhost:1", "--duration", "nan"], "--duration"),
    (["scrape", "localhost:1", "--interval", "0"], "--interval"),
    (["scrape", "localhost:1", "--count", "0"], "--count"),
    (["torch-snapshot", "x.pickle", "--max-mb", "1e300"], "--max-mb"),
    (["bench", "real", "--block-size", "0"], "--block-size"),
    (["bench", "real", "--steps", "0"], "--steps"),
    (["bench", "attention", "--repeats", "5"], "--repeats"),
    (["bench", "attention", "--batch", str(2**63)], "--batch"),
])
def test_out_of_range_flag_is_one_error_line(capsys, argv, needle) -> None:
    assert needle in _one_error(capsys, argv)


def test_bench_without_what_is_one_error_line(capsys) -> None:
    assert "attention or real" in _one_error(capsys, ["bench"])


def test_bench_shape_too_large_is_refused_before_allocating(capsys) -> None:
    line = _one_error(capsys, ["bench", "attention", "--batch", "4096", "--context", "1048576"])
    assert "GiB" in line


@pytest.mark.parametrize("argv", [
    ["simulate", "--help"], ["collect", "--help"], ["scrape", "--help"],
    ["bench", "real", "--help"], ["torch-snapshot", "--help"],
])
def test_help_states_the_ranges(capsys, argv) -> None:
    assert main(argv) == 0
    assert "[range " in capsys.readouterr().out.replace("\n", " ")


@settings(max_examples=60, deadline=None)
@given(lo=st.integers(-2**40, 2**40), span=st.integers(0, 2**40), n=st.integers(-2**70, 2**70))
def test_int_range_accepts_an_integer_iff_it_is_in_range(lo, span, n) -> None:
    typ = at.int_range(lo, lo + span)
    if lo <= n <= lo + span:
        assert typ(str(n)) == n
    else:
        with pytest.raises(argparse.ArgumentTypeError):
            typ(str(n))


@settings(max_examples=60, deadline=None)
@given(text=st.text(max_size=12))
def test_int_range_never_raises_anything_but_its_error(text) -> None:
    try:
        v = at.int_range(0, 100)(text)
    except argparse.ArgumentTypeError:
        return
    assert 0 <= v <= 100


@settings(max_examples=60, deadline=None)
@given(x=st.one_of(st.floats(allow_nan=True), st.sampled_from(["nan", "inf", "-inf", "", "x"])))
def test_float_range_is_finite_and_in_range(x) -> None:
    typ = at.float_range(0.0, 10.0, lo_open=True)
    try:
        v = typ(str(x))
    except argparse.ArgumentTypeError:
        return
    assert 0.0 < v <= 10.0


def test_rate_allows_inf_but_not_nan() -> None:
    assert at.RATE("inf") == float("inf")
    with pytest.raises(argparse.ArgumentTypeError):
        at.RATE("nan")
    with pytest.raises(argparse.ArgumentTypeError):
        at.RATE("-inf")
