"""Helpers: run the collector CLI in this process, or as `python -m collectors` child."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kvviz.commands.cli import main
from kvviz.core.errors import StoreError
from kvviz.store.reader import RunReader

ROOT = Path(__file__).resolve().parents[2]
FAST_SIM = ["--mode", "sim", "--quiet", "--steps-per-s", "0", "--hz", "20"]


def collect(*argv: str) -> int:
    return main(["collect", *argv])


def spawn(out: Path, *argv: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "collectors", "--out", str(out), *argv],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def wait_for_samples(path: Path, n: int, proc: subprocess.Popen, timeout: float = 30) -> int:
    """Poll as a reader in this process until at least n samples are committed."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
        try:
            r = RunReader(path)
            got = len(r.samples())
            r.close()
            if got >= n:
                return got
        except StoreError:
            pass  # not created yet
        time.sleep(0.05)
    pytest.fail(f"no {n} samples in {path} within {timeout} s")
