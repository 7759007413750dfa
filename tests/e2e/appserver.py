"""Start the dashboard the way the README says, on a free port, and stop it afterwards."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def serve(runs_dir: Path, *, env: dict[str, str] | None = None,
          log: Path | None = None) -> Iterator[str]:
    """`streamlit run app.py --server.port PORT --server.headless true`; yields the base URL."""
    port = free_port()
    full_env = {**os.environ, "KVVIZ_RUNS_DIR": str(runs_dir), **(env or {})}
    out = open(log or os.devnull, "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port),
         "--server.headless", "true"], cwd=ROOT, env=full_env, stdout=out,
        stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(url + "/_stcore/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"streamlit did not come up on {url} (rc {proc.poll()})")
            time.sleep(0.3)
        yield url
    finally:
        proc.terminate()  # streamlit exits cleanly; its atexit stops the demo collector
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        out.close()


IDLE = '[data-testid="stApp"][data-test-script-state="notRunning"]'  # the script run ended
# a moment for charts to lay out once the run ended; README's pictures ($KVVIZ_SCREENSHOTS) more
LAYOUT_MS = 2500 if os.environ.get("KVVIZ_SCREENSHOTS") else 500


def settle(page, selector: str | None = None, timeout_ms: int = 60_000) -> None:
    """Wait for `selector`, then for the page's script run to end (every element and error box
    of that run is drawn by then), then LAYOUT_MS for the charts to lay out."""
    if selector:
        page.wait_for_selector(selector, timeout=timeout_ms)
    page.wait_for_selector(IDLE, timeout=timeout_ms)
    page.wait_for_timeout(LAYOUT_MS)


def launch(playwright):
    return playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS,
                                      headless=True)
