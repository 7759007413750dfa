"""The same flag means the same thing in every command: one type and range, one bare-flag value,
one set of choices, one default and one --help text."""
from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from kvviz.commands.cli import COMMANDS, build_parser
from kvviz.commands.simulate import lanes_from_args
from kvviz.core.config import DEFAULT_LANES
from kvviz.settings.collector import DEFAULTS
from kvviz.settings.flags import settings_of

TEXT_TYPES = (None, str, Path)  # a flag's text kept as it is (a path, a name)


def _parser(cmd: str) -> argparse.ArgumentParser:
    return build_parser(cmd)._subparsers._group_actions[0].choices[cmd]


def _flags() -> dict[str, dict[str, argparse.Action]]:
    out: dict[str, dict[str, argparse.Action]] = {}
    for cmd in COMMANDS:
        for a in _parser(cmd)._actions:
            for s in a.option_strings:
                if s not in ("-h", "--help"):
                    out.setdefault(s, {})[cmd] = a
    return out


SHARED = {s: d for s, d in _flags().items() if len(d) > 1}


def _default(cmd: str, a: argparse.Action) -> object:
    """What the command uses when the flag is not given (collect's are CollectorConfig's;
    simulate's lanes are lanes_from_args's)."""
    if cmd == "collect" and a.default == argparse.SUPPRESS:
        return DEFAULTS[a.dest]
    if cmd == "simulate" and a.dest == "lane":
        return tuple(lanes_from_args(_parser("simulate").parse_args([])))
    return a.default


def _item(a: argparse.Action) -> object:
    """The type of one value: a comma list's items (kvviz whatif's alternatives) parse as the
    single-value flag of the same name does."""
    return getattr(a.type, "item", a.type)


@pytest.mark.parametrize("flag", sorted(SHARED))
def test_a_shared_flag_parses_the_same_way_everywhere(flag: str) -> None:
    sig = {cmd: ("text" if _item(a) in TEXT_TYPES else getattr(_item(a), "range_text", _item(a)),
                 a.nargs, a.const, tuple(a.choices or ()), type(a).__name__)
           for cmd, a in SHARED[flag].items()}
    assert len(set(sig.values())) == 1, f"{flag} differs between commands: {sig}"


@pytest.mark.parametrize("flag", sorted(s for s, d in SHARED.items() if {"simulate", "collect"}
                                        <= set(d)))
def test_simulate_and_collect_share_every_default(flag: str) -> None:
    got = {cmd: _default(cmd, SHARED[flag][cmd]) for cmd in ("simulate", "collect")}
    assert got["simulate"] == got["collect"], f"{flag}: defaults differ: {got}"


@pytest.mark.parametrize("flag", ["--rate", "--capacity-tokens", "--model", "--lane",
                                  "--max-num-seqs", "--max-num-batched-tokens",
                                  "--enable-chunked-prefill", "--watermark"])
def test_the_demo_flags_have_one_help_text(flag: str) -> None:
    helps = {cmd: a.help for cmd, a in SHARED[flag].items()
             if not hasattr(a.type, "item")}  # a comma list of alternatives says so
    assert len(set(helps.values())) == 1, f"{flag}: --help differs: {helps}"


def test_the_shared_defaults_are_the_live_demos() -> None:
    sim = _parser("simulate").parse_args([])
    assert (sim.rate, sim.capacity_tokens, sim.model) == (3.0, 16384, None)
    assert [s.label for s in lanes_from_args(sim)] == [
        "contiguous:first-fit:pow2", "contiguous:first-fit:max", "paged:16"]
    assert tuple(lanes_from_args(sim)) == DEFAULT_LANES


def test_one_lane_flags_replace_the_default_lanes() -> None:
    def lanes(*argv: str) -> list[str]:
        return [s.label for s in lanes_from_args(_parser("simulate").parse_args(list(argv)))]

    assert lanes("--block-size", "32") == ["paged:32"]
    assert lanes("--allocator", "paged") == ["paged:16"]
    assert lanes("--enable-prefix-caching") == ["paged:16:prefix"]
    assert lanes("--reserve", "pow2") == ["contiguous:first-fit:pow2"]
    assert lanes("--allocator", "contiguous", "--placement", "buddy") == [
        "contiguous:buddy:max"]
    assert lanes("--lane", "paged:8", "--block-size", "32") == ["paged:8"]


def test_prefix_sharing_is_the_same_share_in_simulate_and_collect() -> None:
    sim = _parser("simulate")
    assert sim.parse_args(["--prefix-sharing"]).prefix_sharing == 0.5
    assert sim.parse_args(["--prefix-sharing", "0.8"]).prefix_sharing == 0.8
    assert sim.parse_args([]).prefix_sharing == 0.0
    col = build_parser("collect")
    assert settings_of(col.parse_args(["collect", "--prefix-sharing"])).prefix_sharing == 0.5
    assert settings_of(col.parse_args(["collect", "--prefix-sharing", "0.8"])
                       ).prefix_sharing == 0.8
    assert settings_of(col.parse_args(["collect"])).prefix_sharing == 0.0
