"""`python -m collectors` and `kvviz collect` are one command: the same flags, the same error
line, the same run; the collector's entry never goes back through kvviz/commands/cli.py."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from collectors import launch
from kvviz.store.reader import RunReader
from tests.collectors.conftest import FAST_SIM, ROOT, collect


def _module(*argv: str, code: str = "") -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, *(("-c", code) if code else ("-m", "collectors")),
                           *argv], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize("argv", [["--lane", "paged:x"], ["--rate", "-1"], ["--bogus"],
                                  ["--prefix-sharing", "2"]])
def test_a_bad_flag_is_the_same_one_line_both_ways(argv, capsys) -> None:
    assert collect(*argv) == 2
    cli_err = capsys.readouterr().err
    p = _module(*argv)
    assert p.returncode == 2 and p.stderr == cli_err and len(cli_err.splitlines()) == 1
    assert cli_err.startswith("kvviz collect: error: ")


def test_launch_main_records_a_run_and_never_imports_the_cli(tmp_path: Path) -> None:
    out = tmp_path / "r.db"
    code = ("import sys; from collectors.launch import main; rc = main(sys.argv[1:]); "
            "assert 'kvviz.commands.cli' not in sys.modules "
            "and 'kvviz.commands' not in sys.modules, "
            "sorted(m for m in sys.modules if m.startswith('kvviz.c')); sys.exit(rc)")
    p = _module(*FAST_SIM, "--duration", "0.5", "--lane", "paged:8", "--out", str(out),
                code=code)
    assert p.returncode == 0, p.stderr
    assert RunReader(out).lanes() == ["paged:8"]


def test_the_settings_reach_the_collector_unchanged(tmp_path: Path) -> None:
    from kvviz.settings.collector import CollectorConfig, parse_lanes

    settings = CollectorConfig(mode="sim", lanes=parse_lanes(["paged:8:prefix"]),
                               prefix_sharing=0.5, duration=3.0, out=str(tmp_path / "s.db"))
    col = launch.build(settings)
    assert col.settings is settings
    assert col.meta()["collector"]["duration_s"] == 3.0  # the run's length, not a trace window
    assert col.resolved.workload.prefix_share == 0.5 and col.resolved.device == "cpu"
