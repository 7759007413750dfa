"""The dashboard's `kvviz scrape` subprocess and the node recordings under the runs directory.

No streamlit: pages/node.py keeps one ScrapeProcess per server (st.cache_resource). Names
are file names inside the runs directory, as in kvviz.live.
"""
from __future__ import annotations

import os
import sqlite3
import sys
from pathlib import Path
from typing import NamedTuple

from kvviz import lifecycle
from kvviz.node.scrape import normalize_url
from kvviz.node.trust import check_scrape_url
from kvviz.subproc import LoggedProcess, stop_all, unique_recording  # noqa: F401 (re-export)

ROOT = Path(__file__).resolve().parents[2]  # where `python -m kvviz` finds the package
SNAPSHOT_SUFFIXES = (".pickle", ".pkl")


class ScrapeStatus(NamedTuple):
    state: str  # "running" | "stopped" | "not started"
    pid: int | None
    returncode: int | None
    url: str | None
    recording: str | None  # file name in the runs directory
    last_message: str  # the last lines the scraper printed (one line per sample)


class ScrapeProcess(LoggedProcess):
    """One `python -m kvviz scrape URL --out runs/node-<time>.db` at a time; thread-safe."""

    def __init__(self, root: Path, *, python: str = sys.executable) -> None:
        super().__init__()
        self.root, self.python = Path(root), python
        self.url: str | None = None
        self.recording: Path | None = None

    def start(self, url: str, interval_s: float = 2.0, timeout_s: float = 3.0) -> Path:
        """Stop any running scrape and start one of `url`; NodeUrlError for a bad URL,
        ScrapeNotAllowedError for a host outside KVVIZ_SCRAPE_ALLOW."""
        url = normalize_url(url)
        check_scrape_url(url)
        if not (interval_s > 0 and timeout_s > 0):
            raise ValueError("scrape interval and timeout must be > 0 s")
        with self._lock:
            out = unique_recording(self.root, "node")
            self._launch_locked([self.python, "-m", "kvviz", "scrape", url, "--out", str(out),
                                 "--interval", str(interval_s), "--timeout", str(timeout_s)],
                                out, ROOT, env={lifecycle.PARENT_ENV: str(os.getpid())})
            self.url, self.recording = url, out
            return out

    def last_message(self, lines: int = 3, max_bytes: int = 8192) -> str:
        return super().last_message(lines, max_bytes)

    def status(self) -> ScrapeStatus:
        state, pid, rc = self._state()
        if state == "not started":
            return ScrapeStatus(state, None, None, None, None, "")
        return ScrapeStatus(state, pid, rc, self.url,
                            self.recording.name if self.recording else None, self.last_message())


def _mode(path: Path) -> str | None:
    """The recording's meta mode, read with sqlite3 alone (None when it is not one)."""
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=1.0)
        try:
            row = db.execute("SELECT json_extract(meta, '$.mode') FROM run WHERE id = 1")
            got = row.fetchone()
        finally:
            db.close()
    except sqlite3.Error:
        return None
    return None if got is None else got[0]


def node_recordings(root: Path) -> list[str]:
    """Names of the node recordings (meta mode "node") directly under `root`, newest first."""
    from kvviz.live import list_runs

    return [r.name for r in list_runs(root) if _mode(r.path) == "node"]


def snapshot_files(root: Path) -> list[str]:
    """Names of the pickles directly under `root` (e.g. a collector's *-torchsnap-<n>.pickle),
    newest first. Opened only through kvviz.torchsnap's safe loader."""
    root = root.resolve()
    found = [p for p in root.iterdir() if p.suffix in SNAPSHOT_SUFFIXES and p.is_file()
             and p.resolve().parent == root]
    return [p.name for p in sorted(found, key=lambda p: p.stat().st_mtime, reverse=True)]
