"""A terminal's Ctrl-C reaches the command's whole process group: its helper processes (the
memory guard's watcher, attach's scrape worker) leave it to the command, which ends them,
and print no traceback of their own."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}

COMMAND = """
import sys, time
from kvviz.node.kvevents import guard
g = guard.MemoryGuard(prog="kvviz events", trip_mb=10**6, hard_mb=10**6, watch_mb=10**6)
print("ready", flush=True)
try:
    time.sleep(60)
except KeyboardInterrupt:
    g.close()
    print("kvviz events: stopped", file=sys.stderr)
"""


def _ctrl_c(p: subprocess.Popen) -> tuple[int, str]:
    os.killpg(p.pid, signal.SIGINT)  # what a terminal sends: the whole foreground group
    try:
        _out, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
    return p.returncode, err


def test_ctrl_c_leaves_the_guards_watcher_quiet():
    p = subprocess.Popen([sys.executable, "-c", COMMAND], env=ENV, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    assert p.stdout.readline() == "ready\n"
    time.sleep(0.3)  # the watcher is in its loop
    code, err = _ctrl_c(p)
    assert code == 0 and err == "kvviz events: stopped\n", err


def test_ctrl_c_leaves_the_scrape_worker_to_its_command():
    p = subprocess.Popen([sys.executable, "-m", "kvviz.node.scrape_child"], env=ENV,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    time.sleep(1.5)  # imported and reading its stdin
    os.killpg(p.pid, signal.SIGINT)
    time.sleep(0.3)
    assert p.poll() is None  # still serving; its command ends it by closing stdin
    _out, err = p.communicate("", timeout=30)
    assert p.returncode == 0 and "Traceback" not in err, err
