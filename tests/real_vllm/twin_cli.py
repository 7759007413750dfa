"""The twin's side of the real-vLLM tier: `kvviz whatif` run as a user runs it, and vLLM's own
count of the steps it ran, read from the plugin's samples of a recording."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np

from kvviz.store.reader import RunReader
from tests.real_vllm.server import ROOT


def whatif(path, *extra) -> list[dict]:
    """`kvviz whatif PATH --json EXTRA...`: the head line, then one row per configuration."""
    p = subprocess.run([sys.executable, "-m", "kvviz", "whatif", str(path), "--json",
                        "--workers", "2", *extra], capture_output=True, text=True, cwd=ROOT,
                       timeout=600, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin",
                                         "HOME": "/root"})
    assert p.returncode == 0, p.stderr[-3000:]
    return [json.loads(line) for line in p.stdout.splitlines()]


def vllm_busy_steps(path) -> tuple[int, int]:
    """(busy steps, requests) by vLLM's own counts: a step S ran requests when vLLM's running
    queue held any before it or after it (the plugin samples len(Scheduler.running) after
    every step); the requests from the log."""
    r = RunReader(path)
    try:
        s = r.samples("vllm")
        n = len(r.table("request_log"))
    finally:
        r.close()
    run = dict(zip(s["step"].astype(int), s["running"].astype(int)))
    steps = np.arange(min(run), max(run) + 1)
    assert all(int(k) in run for k in steps), "a step without its sample (every step is)"
    busy = [k for k in steps[1:] if run[int(k) - 1] > 0 or run[int(k)] > 0]
    return len(busy), n
