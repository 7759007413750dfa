"""`kvviz warm` compiles the rule into its cache directory, so a later process only loads it."""
from __future__ import annotations

import os
import subprocess
import sys

from kvviz.commands.cli import main


def test_warm_fills_the_rule_cache(tmp_path) -> None:
    # a fresh cache directory, in a child: the rule's cache location is fixed at import
    env = {"NUMBA_CACHE_DIR": str(tmp_path), "PATH": "/usr/bin:/bin",
           "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    res = subprocess.run([sys.executable, "-m", "kvviz", "warm"], env=env, capture_output=True,
                         text=True, timeout=900)
    assert res.returncode == 0, res.stderr
    assert "the scheduling rule is ready" in res.stderr
    (rule_dir,) = tmp_path.glob("kvviz-rule-*")
    assert list(rule_dir.rglob("*.nbi")), "nothing was cached"


def test_warm_quiet_says_nothing(capsys) -> None:
    assert main(["warm", "--quiet"]) == 0
    assert capsys.readouterr().err == ""
