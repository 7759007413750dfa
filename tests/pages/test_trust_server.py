"""The Host check on a real Streamlit server: a websocket opened with a forged Host, as a page
on a rebinding domain would open it, is refused by Streamlit itself (server.allowedHosts in
.streamlit/config.toml, read next to app.py from any working directory). app.py's own check,
behind it, is tested through AppTest (test_trust_pages.py)."""
from __future__ import annotations

import base64
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.pages.pagehelpers import ROOT

FORGED = "rebind.attacker.example"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def server(tmp_path: Path):
    """`streamlit run app.py` on a free port, started from another directory."""
    port = _free_port()
    env = {**os.environ, "KVVIZ_RUNS_DIR": str(tmp_path), "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", str(ROOT / "app.py"), "--server.port",
         str(port), "--server.address", "127.0.0.1", "--server.headless", "true",
         "--browser.gatherUsageStats", "false"],
        cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    end = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=1)
            break
        except OSError:
            if time.monotonic() > end or proc.poll() is not None:
                proc.kill()
                pytest.fail("streamlit did not start")
            time.sleep(0.3)
    yield port
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()


def upgrade_status(port: int, host: str) -> str:
    """The status line answering a websocket upgrade with this Host (and same-site Origin)."""
    key = base64.b64encode(os.urandom(16)).decode()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall((f"GET /_stcore/stream HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\n"
                   f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                   f"Sec-WebSocket-Version: 13\r\nOrigin: http://{host}\r\n\r\n").encode())
        return s.recv(256).split(b"\r\n")[0].decode()


def test_streamlit_refuses_a_forged_host_and_serves_loopback(server):
    assert " 403 " in upgrade_status(server, f"{FORGED}:{server}")
    for host in (f"127.0.0.1:{server}", f"localhost:{server}", f"[::1]:{server}"):
        assert " 101 " in upgrade_status(server, host)
