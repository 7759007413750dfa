"""Every dashboard job watches its parent: SIGKILL the dashboard and the job stops itself,
closing its recording as stopped (kvviz/runs/lifecycle.py; the collector's case is in
tests/collectors/test_lifecycle.py)."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.procs import alive, run_status, wait_until

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = """
import sys, time
from pathlib import Path
from kvviz.runs import jobs
root, kind, target = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
if kind == "events":
    job = jobs.EventsJob(root)
    out = job.start([target])
else:
    job = jobs.ScrapeJob(root)
    out = job.start(target, interval_s=0.5, timeout_s=0.5)
print(job.status().pid, out, flush=True)
time.sleep(300)
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
@pytest.mark.parametrize("kind", ["events", "scrape"])
def test_a_job_stops_itself_when_the_dashboard_is_killed(tmp_path, kind):
    port = _free_port()  # nothing listens: the job keeps trying, as against a quiet node
    target = f"tcp://127.0.0.1:{port}" if kind == "events" else f"http://127.0.0.1:{port}"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KVVIZ_SCRAPE_ALLOW": "127.0.0.1"}
    dash = subprocess.Popen([sys.executable, "-c", DASHBOARD, str(tmp_path), kind, target],
                            stdout=subprocess.PIPE, cwd=ROOT, env=env)
    pid_s, out_s = dash.stdout.readline().decode().split()
    child, out = int(pid_s), Path(out_s)
    try:
        wait_until(lambda: out.exists() and run_status(out)[0] == "running", 30, "no recording")
        dash.kill()  # SIGKILL: no atexit, no stop_all; only the child's own watch is left
        dash.wait(10)
        wait_until(lambda: not alive(child), 15, f"the {kind} job outlived its dashboard")
        status, message = run_status(out)
        assert status == "stopped" and "parent process" in message, (status, message)
    finally:
        if alive(child):
            os.kill(child, signal.SIGKILL)
        dash.stdout.close()
