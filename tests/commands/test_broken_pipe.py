"""`kvviz CMD | head`: the reader leaving early is no error (no "error: Broken pipe" line)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LONG_OUTPUT = """
import sys, time
from kvviz.commands import cli
import kvviz.commands.info as info
def run(args):
    time.sleep(0.3)  # the reader has gone by now
    for i in range(200_000):
        print("line", i)
    return 0
info.run = run
sys.exit(cli.main(["info", "any.db"]))
"""


def test_a_reader_that_leaves_early_gets_no_error_line():
    p = subprocess.Popen([sys.executable, "-c", LONG_OUTPUT], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, cwd=ROOT, env={**os.environ,
                                                                "PYTHONPATH": str(ROOT)})
    p.stdout.close()  # `| head -0`
    err = p.stderr.read().decode()
    assert p.wait(60) == 141 and err == "", err
