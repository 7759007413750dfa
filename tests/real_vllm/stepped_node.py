"""One run of a real vLLM engine stepped by hand (tests/real_vllm/stepped_engine.py, in the
vLLM venv), with kvviz's plugin sampling every step and `kvviz attach --blocks` recording it;
what vLLM itself said about the run kept beside the recording: its step counter, its
Prometheus preemption counter, each request's arrival step and output length."""
from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from tests.real_vllm import groundtruth as gt
from tests.real_vllm.blocks_scenario import _lane_rows, wait_for
from tests.real_vllm.server import ROOT, free_port, venv_python

DRIVER = Path(__file__).with_name("stepped_engine.py")
READY_S = 240.0
RUN_S = 400.0


def _line(proc: subprocess.Popen, most_s: float, log: Path) -> dict:
    """The driver's next JSON line; an AssertionError with its log's tail when it stops or
    says nothing for most_s."""
    ready, _, _ = select.select([proc.stdout], [], [], most_s)
    text = proc.stdout.readline() if ready else ""
    if not text:
        tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
        raise AssertionError(f"the stepped vLLM engine said nothing in {most_s:.0f} s (exit "
                             f"{proc.poll()}); its log {log}:\n{tail}")
    return json.loads(text)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    try:
        proc.stdin.write("stop\n")
        proc.stdin.flush()
        proc.wait(30)
    except (OSError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(10)


def record(workdir: Path, plan: dict, name: str) -> dict:
    """Run `plan` (stepped_engine.py's PLAN, less the port) in a fresh engine while `kvviz
    attach --blocks` records it to workdir/NAME.db."""
    port = free_port()
    blocks = f"ipc://{workdir}/{name}-blocks.ipc"
    (workdir / f"{name}-plan.json").write_text(json.dumps({**plan, "metrics_port": port}))
    log = workdir / f"{name}-vllm.log"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONHASHSEED": "0",
           "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1",
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "KVVIZ_BLOCKS_ENDPOINT": blocks, "KVVIZ_BLOCKS_EVERY_STEPS": "1",
           "KVVIZ_BLOCKS_QUEUE": "1024"}
    out = workdir / f"{name}.db"
    t0 = time.monotonic()
    with log.open("wb") as fh:
        proc = subprocess.Popen([str(venv_python()), str(DRIVER), f"{name}-plan.json"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=fh,
                                text=True, cwd=workdir, env=env, start_new_session=True)
    attach = None
    res: dict = {"path": out, "log": log}
    try:
        assert _line(proc, READY_S, log) == {"ready": True}
        attach = subprocess.Popen(
            [sys.executable, "-m", "kvviz", "attach", f"http://127.0.0.1:{port}/metrics",
             "--blocks", blocks, "--interval", "1", "--quiet", "--out", str(out)],
            env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True)
        assert wait_for(lambda: len(_lane_rows(out)) > 0), "no block-stream sample recorded"
        proc.stdin.write("go\n")
        proc.stdin.flush()
        res["vllm"] = said = _line(proc, RUN_S, log)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            res["preemptions"] = int(gt.one(gt.metrics(r.read().decode()),
                                            "vllm:num_preemptions_total"))
        # the run's last sample (taken when the scheduler ran dry) is in the recording
        assert wait_for(lambda: (lambda s: int(s.iloc[-1]["step"]) == said["steps"]
                                 and s.iloc[-1]["running"] == 0)(_lane_rows(out)))
        time.sleep(1.5)
    finally:
        if attach is not None:
            attach.send_signal(signal.SIGTERM)
            _out, err = attach.communicate(timeout=60)
            res["attach"] = (attach.returncode, err)
        _stop(proc)
    res["wall_s"] = time.monotonic() - t0
    return res
