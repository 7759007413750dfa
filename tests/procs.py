"""Helpers for tests that watch processes and recordings end (lifecycle, orphaned jobs)."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from kvviz.store.reader import RunReader


def alive(pid: int) -> bool:
    try:  # a zombie (exited, not yet reaped by its new parent) counts as gone
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in "ZX"
    except OSError:
        return False


def wait_until(cond, timeout_s: float, what: str) -> None:
    end = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > end:
            pytest.fail(f"{what} within {timeout_s} s")
        time.sleep(0.1)


def run_status(path: Path) -> tuple[str, str]:
    """(status, status_message) of the recording at `path`."""
    r = RunReader(path)
    try:
        return r.status, r.status_message
    finally:
        r.close()
