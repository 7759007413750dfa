"""Fuzz every `kvviz` command: hostile flags, values, paths and trace contents.

Property (docs/RELIABILITY.md, "CLI fuzzing"): exit 0, or exit 2 with exactly one stderr line
`kvviz CMD: error: ...`; never a traceback, a hang (each call has a SIGALRM deadline) or a
signal. In-process through kvviz.commands.cli.main for speed (the slow loops are faked: see
hostile.py), plus a few real subprocesses. KVVIZ_FUZZ_EXAMPLES scales the runs;
KVVIZ_FUZZ_REPORT=FILE writes the number of cases tried per command.
"""
from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fuzz import hostile
from tests.fuzz.hostile import NUMBERS, WORDS, check_property, run_cli

EXAMPLES = int(os.environ.get("KVVIZ_FUZZ_EXAMPLES", "40"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])
COUNTS: Counter[str] = Counter()
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def paths(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return hostile.hostile_paths(tmp_path_factory.mktemp("hostile"))


@pytest.fixture(scope="module", autouse=True)
def report():
    yield
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode), "/dev/null is no longer a device"
    if os.environ.get("KVVIZ_FUZZ_REPORT"):
        hostile.write_report(os.environ["KVVIZ_FUZZ_REPORT"], dict(COUNTS))


@pytest.fixture()
def sandbox(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Fakes for the slow parts and a scratch cwd (collect's default runs/ lands there)."""
    hostile.install_fakes(monkeypatch)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _parser(cmd: str, sub: str | None = None):
    from kvviz.commands.cli import build_parser

    top = build_parser(cmd)
    p = top._subparsers._group_actions[0].choices[cmd]
    if sub is not None:
        p = p._subparsers._group_actions[0].choices[sub]
    return p


def _values(paths: dict[str, str]) -> st.SearchStrategy[str]:
    return st.sampled_from(NUMBERS + WORDS + sorted(paths.values()))


@st.composite
def _argv(draw, flags: list[tuple[str, bool]], values: st.SearchStrategy[str]) -> list[str]:
    argv: list[str] = []
    for flag, takes in draw(st.lists(st.sampled_from(flags), max_size=5)):
        argv += [flag, draw(values)] if takes else [flag]
    return argv


def _fuzz(cmd: str, sub: str | None, positional: int, tail: list[str], data, paths,
          allow_one: bool = False) -> None:
    values = _values(paths)
    argv = [cmd] + ([sub] if sub else [])
    argv += [data.draw(values) for _ in range(positional)]
    argv += data.draw(_argv(hostile.flags_of(_parser(cmd, sub)), values)) + tail
    res = run_cli(argv)
    COUNTS[cmd + (f" {sub}" if sub else "")] += 1
    check_property(cmd, argv, res, allow_one=allow_one)


@FUZZ
@given(data=st.data())
def test_simulate(sandbox, paths, data) -> None:
    _fuzz("simulate", None, 0, ["--requests", "5"], data, paths)


@FUZZ
@given(data=st.data())
def test_collect(sandbox, paths, data) -> None:
    _fuzz("collect", None, 0, ["--quiet"], data, paths)


@FUZZ
@given(data=st.data())
def test_bench_attention(sandbox, paths, data) -> None:
    _fuzz("bench", "attention", 0, [], data, paths)


@FUZZ
@given(data=st.data())
def test_bench_real(sandbox, paths, data) -> None:
    _fuzz("bench", "real", 0, [], data, paths)


@FUZZ
@given(data=st.data())
def test_info(sandbox, paths, data) -> None:
    _fuzz("info", None, 1, [], data, paths)


@FUZZ
@given(data=st.data())
def test_export(sandbox, paths, data) -> None:
    _fuzz("export", None, 1, [], data, paths)


@FUZZ
@given(data=st.data())
def test_scrape(sandbox, paths, data) -> None:
    # --count 1 last: every earlier value is still parsed, and the loop ends after one scrape
    _fuzz("scrape", None, 1, ["--count", "1", "--quiet"], data, paths, allow_one=True)


@FUZZ
@given(data=st.data())
def test_torch_snapshot(sandbox, paths, data) -> None:
    _fuzz("torch-snapshot", None, 1, [], data, paths)


@FUZZ
@given(data=st.data())
def test_whatif(sandbox, paths, data) -> None:
    _fuzz("whatif", None, 1, ["--workers", "1"], data, paths)


@FUZZ
@given(data=st.data())
def test_warm(sandbox, paths, data) -> None:
    _fuzz("warm", None, 0, ["--quiet"], data, paths)


@FUZZ
@given(data=st.data())
def test_events(sandbox, paths, data) -> None:
    # a real subscriber (nothing listens on port 1): --duration 0.3 last ends every run
    endpoint = data.draw(st.sampled_from(["tcp://127.0.0.1:1", "ipc://x.sock"]))
    _fuzz("events", None, 0, [endpoint, "--duration", "0.3", "--quiet"], data, paths)


_CELL = st.sampled_from(["0", "1", "7", "-1", "1.5", "nan", "inf", "1e400", str(2**63),
                         str(2**64 + 5), "-9223372036854775809", "", " ", "x", '"3"', "true",
                         "null", "[]", "{}", "\x1b[2J", "\x00", "9" * 50])
_ROW = st.lists(_CELL, min_size=0, max_size=5).map(",".join)
_JSON_ROW = st.fixed_dictionaries({}, optional={
    "arrival_s": _CELL, "prompt_tokens": _CELL, "output_tokens": _CELL, "prefix_group": _CELL,
}).map(lambda d: "{" + ", ".join(f'"{k}": {v or 0}' for k, v in d.items()) + "}")
_TRACE = st.one_of(
    st.lists(_ROW, max_size=6).map(
        lambda rows: "\n".join(["arrival_s,prompt_tokens,output_tokens,prefix_group", *rows])),
    st.lists(_JSON_ROW, min_size=1, max_size=6).map("\n".join),
    st.text(max_size=200),
    st.sampled_from(["[" * 50_000, '{"a":' * 20_000, "a," * 100_000, "\ufeff{}", "\r\n\r\n"]),
)


@FUZZ
@given(text=_TRACE, binary=st.binary(max_size=64), as_bytes=st.booleans())
def test_trace_contents(sandbox, text, binary, as_bytes) -> None:
    trace = sandbox / ("t.csv" if text[:1] != "{" else "t.jsonl")
    if as_bytes:
        trace.write_bytes(binary)
    else:
        trace.write_text(text, encoding="utf-8", errors="surrogatepass")
    argv = ["simulate", "--trace", str(trace)]
    res = run_cli(argv)
    COUNTS["simulate --trace (contents)"] += 1
    check_property("simulate", argv, res)
    argv = ["whatif", str(trace), "--workers", "1"]  # the same reader, the twin's way in
    check_property("whatif", argv, run_cli(argv))


@pytest.mark.parametrize("argv", [
    ["simulate", "--trace", "{fifo}"],
    ["torch-snapshot", "{fifo}"],
    ["info", "{fifo}"],
    ["whatif", "{fifo}"],
    ["collect", "--mode", "sim", "--out", "{dev_null}", "--overwrite"],
    ["bench", "real", "--block-size", "0"],
    ["simulate", "--capacity-tokens", "1000000000000"],
])
def test_subprocess_one_error_line(paths, argv) -> None:
    argv = [a.format(**paths) for a in argv]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "kvviz", *argv], capture_output=True,
                          text=True, timeout=30, env=env, cwd=ROOT)
    COUNTS[f"{argv[0]} (subprocess)"] += 1
    check_property(argv[0], argv, hostile.Result(proc.returncode, proc.stdout, proc.stderr, ""))
    assert proc.returncode == 2
