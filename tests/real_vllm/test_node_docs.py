"""docs/NODE.md section 7, word for word: its CPU vLLM command and its `kvviz attach` command,
taken from the markdown and run as written in bash (ports 8000 and 5558 and
ipc:///tmp/vllm-kv.ipc, as the page says), then one completion, then Ctrl-C: the recording
holds the node's scrapes and its KV events. Runs before the tier's own server starts (file
order), and stops its server at the end."""
from __future__ import annotations

import json
import os
import re
import signal
import socket
import sqlite3
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from tests.real_vllm.server import READY_S, venv_problem

ROOT = Path(__file__).resolve().parents[2]


def _blocks(text: str) -> list[str]:
    return re.findall(r"```bash\n(.*?)```", text, flags=re.S)


def node_md_commands() -> tuple[str, str]:
    """(the CPU vLLM block, the attach block) of NODE.md section 7, as written."""
    doc = (ROOT / "docs" / "NODE.md").read_text()
    sec = doc[doc.index("## 7."):]
    cpu = sec[sec.index("**vLLM on a CPU**"):]
    (attach,) = [b for b in _blocks(sec)[:1] if "\nkvviz attach" in b]
    return _blocks(cpu)[0], attach


def test_the_commands_are_where_the_page_says():
    server, attach = node_md_commands()
    assert "VLLM_CPU_KVCACHE_SPACE=" in server and "vllm.entrypoints.openai.api_server" in server
    assert "--port 8000" in server and "ipc:///tmp/vllm-kv.ipc" in server
    assert "localhost:8000" in attach and "ipc:///tmp/vllm-kv.ipc" in attach


def _busy(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def _stop(p: subprocess.Popen, sig: int = signal.SIGTERM, wait_s: float = 30) -> None:
    if p.poll() is not None:
        return
    os.killpg(p.pid, sig)
    try:
        p.wait(wait_s)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait(10)


def test_node_md_vllm_and_attach_run_as_written(tmp_path):
    why = venv_problem()
    if why:
        pytest.skip(f"real-vLLM tier skipped: {why}")
    if _busy(8000) or _busy(5558):
        pytest.skip("port 8000 or 5558 is in use: NODE.md's commands need both")
    server_cmd, attach_cmd = node_md_commands()
    log = tmp_path / "vllm.log"
    env = {**os.environ, "VLLM_NO_USAGE_STATS": "1", "HF_HUB_OFFLINE": "1"}
    env.pop("PYTHONPATH", None)
    with log.open("wb") as fh:
        srv = subprocess.Popen(["bash", "-c", server_cmd], cwd=ROOT, env=env, stdout=fh,
                               stderr=subprocess.STDOUT, start_new_session=True)
    attach = None
    try:
        deadline = time.monotonic() + float(os.environ.get("KVVIZ_VLLM_READY_S", READY_S))
        while not _busy(8000) or not _health():
            assert srv.poll() is None, f"NODE.md's vLLM command exited: {log.read_text()[-2000:]}"
            assert time.monotonic() < deadline, f"not ready; log: {log}"
            time.sleep(1.0)
        aenv = {**os.environ, "PYTHONPATH": str(ROOT)}
        attach = subprocess.Popen(["bash", "-c", attach_cmd],
                                  cwd=tmp_path, env=aenv, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, start_new_session=True)
        out = tmp_path / "runs" / "node-gpu7.db"
        body = json.dumps({"model": _model_dir(log), "prompt": list(range(1, 100)),
                           "max_tokens": 4, "ignore_eos": True}).encode()
        t_end = time.monotonic() + 60
        while time.monotonic() < t_end and not _recorded(out):
            req = urllib.request.Request("http://127.0.0.1:8000/v1/completions", data=body,
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=60) as r:
                assert r.status == 200
            time.sleep(2.0)
        os.killpg(attach.pid, signal.SIGINT)  # Ctrl-C
        _o, err = attach.communicate(timeout=60)
        assert attach.returncode == 0, err.decode()[-2000:]
        samples, batches = _recorded(out) or (0, 0)
        assert samples > 0 and batches > 0, err.decode()[-2000:]
    finally:
        if attach is not None:
            _stop(attach, signal.SIGINT)
        _stop(srv)


def _health() -> bool:
    try:
        with urllib.request.urlopen("http://127.0.0.1:8000/health", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def _model_dir(log: Path) -> str:
    with urllib.request.urlopen("http://127.0.0.1:8000/v1/models", timeout=10) as r:
        return json.loads(r.read())["data"][0]["id"]


def _recorded(db: Path) -> tuple[int, int] | None:
    """(node scrapes, ok KV-event batches) in the recording, once both are there."""
    if not db.is_file():
        return None
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as c:
            n = c.execute("SELECT COUNT(*) FROM node_samples").fetchone()[0]
            b = c.execute("SELECT COUNT(*) FROM kv_batches WHERE status = 'ok'").fetchone()[0]
    except sqlite3.Error:
        return None
    return (n, b) if n and b else None
