"""Lifecycles with real processes: the dashboard's collector stops when the dashboard is
killed or no one watches it; a killed store writer leaves the run closed as "error"."""
from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kvviz.runs import jobs, process
from kvviz.store.reader import RunReader
from tests.collectors.conftest import ROOT, spawn, wait_for_samples
from tests.procs import alive, run_status, wait_until

IDLE_ENV = "KVVIZ_IDLE_STOP_S"  # kvviz/runs/lifecycle.py (tests/collectors shadows the name)
SIM = jobs.demo_config(mode="sim", hz=10.0, rate=50.0)
DASHBOARD = """
import sys, time
from pathlib import Path
from kvviz.runs.jobs import Collector, demo_config
c = Collector(Path(sys.argv[1]), cwd=Path(sys.argv[2]))
out = c.start(demo_config(mode="sim", hz=10.0, rate=50.0))
print(c.status().pid, out, flush=True)
time.sleep(300)
"""


def _samples(path: Path) -> int:
    r = RunReader(path)
    try:
        return len(r.samples())
    finally:
        r.close()


@pytest.fixture
def env(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    yield
    process.stop_all()


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_killing_the_dashboard_stops_its_collector_and_closes_the_run(tmp_path, env):
    dash = subprocess.Popen([sys.executable, "-c", DASHBOARD, str(tmp_path), str(ROOT)],
                            stdout=subprocess.PIPE, cwd=ROOT)
    pid_s, out_s = dash.stdout.readline().decode().split()
    child, out = int(pid_s), Path(out_s)
    try:
        wait_until(lambda: out.exists() and _samples(out) >= 3, 60, "no samples")
        seen = _samples(out)
        dash.kill()  # SIGKILL: no atexit, no stop_all; only the child's own watch is left
        dash.wait(10)
        wait_until(lambda: not alive(child), 20, "the collector outlived its dashboard")
        status, message = run_status(out)
        assert status == "stopped" and "parent process" in message
        assert _samples(out) >= seen
    finally:
        if alive(child):
            os.kill(child, signal.SIGKILL)


def test_a_collector_no_one_watches_stops_after_the_idle_time(tmp_path, env, monkeypatch):
    monkeypatch.setenv(IDLE_ENV, "2")
    c = jobs.Collector(tmp_path, cwd=ROOT)
    out = c.start(SIM)

    def watched_until_recording() -> bool:
        c.touch_viewer(every_s=0.0)  # a tab watches while the collector starts up
        return out.exists() and _samples(out) >= 3
    wait_until(watched_until_recording, 60, "no samples")
    wait_until(lambda: c.status().state == "stopped", 60, "the idle collector kept running")
    status, message = run_status(out)
    assert status == "stopped" and "no viewer for" in message
    assert c.idle_stopped()
    c.ensure_started(SIM)  # a viewer comes back: a new collector, a new recording
    assert c.status().state == "running" and c.recording != out


def test_a_watched_collector_keeps_running(tmp_path, env, monkeypatch):
    monkeypatch.setenv(IDLE_ENV, "3")
    c = jobs.Collector(tmp_path, cwd=ROOT)
    c.start(SIM)
    end = time.monotonic() + 8  # well past the idle time, touched all along
    while time.monotonic() < end:
        c.touch_viewer(every_s=0.0)
        time.sleep(0.2)
    assert c.status().state == "running", c.last_message()


def test_a_bad_idle_time_is_one_error_line(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), IDLE_ENV: "soon",
           "KVVIZ_PARENT_PID": str(os.getpid())}
    p = subprocess.run([sys.executable, "-m", "collectors", "--out", str(tmp_path / "x.db")],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and p.stderr.startswith("kvviz collect: error: KVVIZ_IDLE_STOP_S")
    assert len(p.stderr.strip().splitlines()) == 1 and not (tmp_path / "x.db").exists()


def _writer_of(pid: int) -> list[int]:
    """The store writer process among the collector's children (not multiprocessing's
    resource tracker)."""
    try:
        kids = [int(x) for x in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
        return [k for k in kids
                if b"resource_tracker" not in Path(f"/proc/{k}/cmdline").read_bytes()]
    except OSError:
        return []


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_killing_the_store_writer_closes_the_run_as_error(tmp_path):
    out = tmp_path / "w.db"
    proc = spawn(out, "--mode", "sim", "--quiet", "--hz", "20", "--rate", "50", "--loop")
    try:
        seen = wait_for_samples(out, 10, proc)
        writers = _writer_of(proc.pid)
        assert len(writers) == 1
        os.kill(writers[0], signal.SIGKILL)
        assert proc.wait(30) == 2  # one error line, not a traceback
        err = proc.stderr.read().decode()
        assert err.startswith("kvviz collect: error: ") and "Traceback" not in err
        status, message = run_status(out)
        assert status == "error" and "store writer" in message
        assert _samples(out) >= seen  # samples lost: 0
        with sqlite3.connect(out) as db:
            assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        if proc.poll() is None:
            proc.kill()
