"""The runs directory: recordings, node and KV-event recordings, traces, torch snapshots.

Safety: everything is named by file name only and resolved inside the runs directory;
nothing outside it is listed or opened, symlinks that lead out included.
"""
from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path
from typing import NamedTuple

from kvviz.core.errors import KvvizError
from kvviz.store import kv_reader
from kvviz.traces.options import SUFFIXES

RUN_SUFFIX = ".db"
LOG_SUFFIX = ".log"  # a job's output, beside its recording
CONFIG_SUFFIX = ".config"  # a collector's settings (kvviz.settings.collector), beside its recording
VIEWER_SUFFIX = ".viewer"  # touched while a tab shows the live collector (kvviz.runs.lifecycle)
CONTROL_SUFFIX = ".control"  # the live collector's pause / step requests (kvviz.runs.control)
SNAPSHOT_SUFFIXES = (".pickle", ".pkl")


def runs_dir() -> Path:
    """$KVVIZ_RUNS_DIR, else ./runs (created on first use)."""
    root = Path(os.environ.get("KVVIZ_RUNS_DIR") or Path.cwd() / "runs").resolve()
    root.mkdir(parents=True, exist_ok=True)
    return root


class RunFile(NamedTuple):
    name: str  # file name inside the runs directory
    path: Path
    size_bytes: int
    mtime: float


def _inside(root: Path, path: Path) -> bool:
    try:
        return path.resolve().is_relative_to(root.resolve())
    except OSError:
        return False


def _listed(root: Path, suffixes: tuple[str, ...]) -> list[RunFile]:
    """Regular files directly under `root` with one of `suffixes`, newest first."""
    out = []
    for p in root.iterdir() if root.is_dir() else ():
        if p.suffix.lower() in suffixes and _inside(root, p) and p.is_file():
            st = p.stat()
            out.append(RunFile(p.name, p, st.st_size, st.st_mtime))
    return sorted(out, key=lambda r: r.mtime, reverse=True)


def _plain_name(name: str, kind: str) -> None:
    """KvvizError unless `name` is a bare file name (no directory part)."""
    if not name or name != Path(name).name or name in (".", ".."):
        raise KvvizError(f"{kind} {name!r}: give a file name inside the runs directory")


def unique_recording(root: Path, prefix: str, suffix: str = RUN_SUFFIX) -> Path:
    """root/<prefix>-<time><suffix>, numbered when taken (its .log and .config count: they
    are written first)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out, k = root / f"{prefix}-{stamp}{suffix}", 2
    while any(out.with_suffix(s).exists() for s in (suffix, LOG_SUFFIX, CONFIG_SUFFIX)):
        out, k = root / f"{prefix}-{stamp}-{k}{suffix}", k + 1
    return out


# ---- recordings ------------------------------------------------------------------------------
def list_runs(root: Path) -> list[RunFile]:
    """Recordings directly under `root`, newest first."""
    return _listed(root, (RUN_SUFFIX,))


def resolve_run(root: Path, name: str) -> Path:
    """The path of recording `name` inside `root`; KvvizError for anything else."""
    _plain_name(name, "recording")
    if not name.endswith(RUN_SUFFIX):
        raise KvvizError(f"recording {name!r}: expected a {RUN_SUFFIX} file")
    path = root / name
    if not _inside(root, path):
        raise KvvizError(f"recording {name!r} leads outside the runs directory")
    if not path.is_file():
        raise KvvizError(f"recording {name!r} does not exist in {root}")
    return path


def open_run(root: Path, name: str):
    """A kvviz.store.RunReader for recording `name` (raises StoreError / KvvizError)."""
    from kvviz.store.reader import RunReader  # the reader pulls in pandas; keep this module light

    return RunReader(resolve_run(root, name))


def _mode(path: Path) -> str | None:
    """The recording's meta mode, read with sqlite3 alone (None when it is not one)."""
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=1.0)
        try:
            got = db.execute("SELECT json_extract(meta, '$.mode') FROM run WHERE id = 1"
                             ).fetchone()
        finally:
            db.close()
    except sqlite3.Error:
        return None
    return None if got is None else got[0]


def node_recordings(root: Path) -> list[str]:
    """Names of the node recordings (meta mode "node") directly under `root`, newest first."""
    return [r.name for r in list_runs(root) if _mode(r.path) == "node"]


def kv_event_recordings(root: Path) -> list[str]:
    """Names of the recordings holding KV-event streams directly under `root`, newest first."""
    out = []
    for f in list_runs(root):
        try:
            conn = kv_reader.connect(f.path)
        except (OSError, sqlite3.Error):
            continue
        try:
            if kv_reader.has_kv_events(conn):
                out.append(f.name)
        except sqlite3.Error:
            continue
        finally:
            conn.close()
    return out


# ---- inputs: traces and torch snapshots --------------------------------------------------------
def list_traces(root: Path) -> list[RunFile]:
    """Trace files (any format kvviz reads) directly under `root`, newest first."""
    return _listed(root, SUFFIXES)


def resolve_trace(root: Path, name: str) -> Path:
    """The path of trace file `name` inside `root`; KvvizError for anything else."""
    _plain_name(name, "trace")
    if Path(name).suffix.lower() not in SUFFIXES:
        raise KvvizError(f"trace {name!r}: expected one of {', '.join(SUFFIXES)}")
    path = root / name
    if not _inside(root, path) or not path.is_file():
        raise KvvizError(f"trace {name!r} is not a file in {root}")
    return path.resolve()


def snapshot_files(root: Path) -> list[str]:
    """Names of the pickles directly under `root` (e.g. a collector's *-torchsnap-<n>.pickle),
    newest first. Open them only through kvviz.torchsnap's safe loader."""
    return [f.name for f in _listed(root, SNAPSHOT_SUFFIXES)]


def resolve_snapshot(root: Path, name: str) -> Path:
    """The path of snapshot `name` inside `root`; KvvizError for anything else."""
    _plain_name(name, "snapshot")
    path = root / name
    if path.suffix.lower() not in SNAPSHOT_SUFFIXES or not _inside(root, path) \
            or not path.is_file():
        raise KvvizError(f"snapshot {name!r} is not a {'/'.join(SNAPSHOT_SUFFIXES)} file "
                         f"in {root}")
    return path
