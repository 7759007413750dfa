"""kvviz.settings.collector: one validated config for `kvviz collect` and the dashboard."""
from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvviz.commands.cli import build_parser, main
from kvviz.settings.collector import DEFAULTS, CollectorConfig, flag, parse_lanes
from kvviz.settings.flags import settings_of

FIELDS = [f.name for f in dataclasses.fields(CollectorConfig)]


def parse(*argv: str):
    return build_parser("collect").parse_args(["collect", *argv])


def test_no_flags_is_the_default_config():
    assert settings_of(parse()) == CollectorConfig()


def test_every_collect_flag_is_a_config_field_and_back():
    p = build_parser("collect")._subparsers._group_actions[0].choices["collect"]
    dests = {a.dest for a in p._actions if a.option_strings} - {"help", "config"}
    assert dests == set(FIELDS)
    assert {flag(f) for f in FIELDS} <= {s for a in p._actions for s in a.option_strings}


def test_flags_fill_the_fields_of_the_same_name():
    c = settings_of(parse("--mode", "sim", "--lane", "paged:8", "--lane", "paged:32",
                      "--hz", "10", "--rate", "inf", "--loop", "--no-audit"))
    assert c == CollectorConfig(mode="sim", lanes=parse_lanes(["paged:8", "paged:32"]),
                                hz=10.0, rate=math.inf, loop=True)


def test_flags_beside_a_config_file_override_its_fields(tmp_path: Path):
    path = CollectorConfig(mode="sim", hz=2.0, seed=7).save(tmp_path / "c.config")
    c = settings_of(parse("--config", str(path), "--hz", "10"))
    assert (c.mode, c.hz, c.seed) == ("sim", 10.0, 7)


@pytest.mark.parametrize("field, value, text", [
    ("hz", 500.0, "500"), ("capacity_tokens", 0, "0"), ("seed", -1, "-1"),
    ("prefix_sharing", 1.5, "1.5"), ("metrics_port", 70000, "70000")])
def test_a_bad_value_has_one_reason_from_a_flag_or_a_file(field, value, text, capsys):
    with pytest.raises(ValueError) as got:
        CollectorConfig(**{field: value})
    assert str(got.value).startswith(f"{field}: must be in ")
    assert main(["collect", flag(field), text]) == 2
    err = capsys.readouterr().err
    assert str(got.value).partition(": ")[2] in err and flag(field) in err


@pytest.mark.parametrize("settings_, field", [
    ({"lanes": ["paged:x"]}, "lanes"), ({"lanes": []}, "lanes"), ({"lanes": "paged:16"}, "lanes"),
    ({"mode": "sim", "audit": True}, "audit"), ({"requests": True}, "requests"),
    ({"hz": "fast"}, "hz"), ({"quiet": 1}, "quiet"), ({"out": 5}, "out"),
    ({"workload": "nope"}, "workload"), ({"mood": "sim"}, "mood"),
    ({"trace": "t.csv", "limit": 0}, "limit"), ({"trace": "t.csv", "trace_format": "x"},
                                               "trace_format")])
def test_a_bad_config_names_the_field(settings_, field):
    with pytest.raises(ValueError, match=f"^{field}: "):
        CollectorConfig.from_json(json.dumps(settings_))


@pytest.mark.parametrize("text", ["[]", "nul", '{"rate": Infinity}', "[" * 100_000])
def test_text_that_is_no_config_object_is_one_error(text):
    with pytest.raises(ValueError):
        CollectorConfig.from_json(text)


def test_a_config_file_must_be_a_small_regular_file(tmp_path: Path):
    big = tmp_path / "big.config"
    big.write_text(" " * 100_000 + "{}")
    for path in (big, tmp_path, tmp_path / "missing.config", Path("/dev/zero")):
        with pytest.raises(ValueError, match="^config "):
            CollectorConfig.load(path)


VALID = st.fixed_dictionaries({}, optional={
    "mode": st.sampled_from(["real", "sim"]), "device": st.sampled_from(["auto", "cpu"]),
    "rate": st.one_of(st.just(math.inf), st.floats(1e-3, 1e9)),
    "requests": st.integers(1, 10_000_000), "seed": st.integers(0, 2**63 - 1),
    "lanes": st.lists(st.sampled_from(["paged:16", "paged:8:prefix", "contiguous:best-fit:max"]),
                      min_size=1, max_size=3).map(parse_lanes),
    "hz": st.floats(0.01, 100), "duration": st.one_of(st.none(), st.floats(0.1, 1e6)),
    "loop": st.booleans(), "out": st.one_of(st.none(), st.text(max_size=20)),
    "metrics_port": st.one_of(st.none(), st.integers(1, 65535))})


@settings(max_examples=50, deadline=None)
@given(VALID)
def test_a_config_survives_its_file(fields):
    c = CollectorConfig(**fields)
    assert CollectorConfig.from_json(c.to_json()) == c


JSONISH = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
                       | st.text(max_size=10), lambda xs: st.lists(xs, max_size=3), max_leaves=5)


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.sampled_from(FIELDS + ["nope"]), JSONISH, max_size=6))
def test_any_settings_object_is_a_config_or_one_error_naming_a_field(data):
    try:
        text = json.dumps(data, allow_nan=False)
    except ValueError:
        return  # infinity: JSON has none (the file writes "inf")
    try:
        c = CollectorConfig.from_json(text)
    except ValueError as exc:
        assert str(exc).partition(": ")[0] in DEFAULTS or "nope" in str(exc)
        return
    assert CollectorConfig.from_json(c.to_json()) == c


def test_the_defaults_the_help_states_are_the_configs():
    """Fields whose default is None are resolved when the collector is built (max_seq_len:
    2048, or a trace's longest request); the others must say in --help what they are."""
    import re

    p = build_parser("collect")._subparsers._group_actions[0].choices["collect"]
    stated = 0
    for a in p._actions:
        m = re.search(r"\(default ([0-9.]+)[;)]", a.help or "")
        value = getattr(CollectorConfig(), a.dest, None)
        if m and value is not None:
            assert m.group(1) == (value if isinstance(value, str) else f"{value:g}"), a.dest
            stated += 1
    assert stated >= 8
