"""The same flag means the same thing in every command: one type and range, one bare-flag value,
one set of choices, and one default, except where a command's default differs on purpose and
its --help says why (DIFFERS)."""
from __future__ import annotations

import argparse
import math
from pathlib import Path

import pytest

from kvviz.cli import COMMANDS, build_parser
from kvviz.collector_config import DEFAULT_LANES, DEFAULTS
from kvviz.collector_flags import settings_of

# flag -> {command: default}: defaults that differ on purpose, each reason stated in --help
DIFFERS = {"--rate": {"simulate": math.inf, "collect": 2.0},
           "--capacity-tokens": {"simulate": 1 << 20, "collect": 16384},
           "--model": {"simulate": "llama-3-8b", "collect": None},
           "--lane": {"simulate": None, "collect": DEFAULT_LANES}}
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
    """What the command uses when the flag is not given (collect's are CollectorConfig's)."""
    return DEFAULTS[a.dest] if a.default == argparse.SUPPRESS and cmd == "collect" else a.default


@pytest.mark.parametrize("flag", sorted(SHARED))
def test_a_shared_flag_parses_the_same_way_everywhere(flag: str) -> None:
    sig = {cmd: ("text" if a.type in TEXT_TYPES else getattr(a.type, "range_text", a.type), a.nargs,
                 a.const, tuple(a.choices or ()), type(a).__name__)
           for cmd, a in SHARED[flag].items()}
    assert len(set(sig.values())) == 1, f"{flag} differs between commands: {sig}"


@pytest.mark.parametrize("flag", sorted(s for s, d in SHARED.items() if {"simulate", "collect"}
                                        <= set(d)))
def test_simulate_and_collect_share_a_default_or_say_why_not(flag: str) -> None:
    acts = SHARED[flag]
    got = {cmd: _default(cmd, acts[cmd]) for cmd in ("simulate", "collect")}
    if flag in DIFFERS:
        assert got == DIFFERS[flag]
        for cmd, a in acts.items():  # the help gives the default and its reason
            why = a.help.partition("default")[2]
            assert why and ":" in why[:60], f"{cmd} {flag}: --help gives no reason: {a.help}"
    else:
        assert got["simulate"] == got["collect"], f"{flag}: defaults differ: {got}"


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
