"""The demo collector subprocess and the recordings under the runs directory (no streamlit).

Safety: recordings are named by file name only and resolved inside the runs directory;
nothing outside it is listed or opened, symlinks that lead out included.
"""
from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from kvviz.config import LENGTH_PRESETS, LaneSpec
from kvviz.errors import KvvizError
from kvviz.subproc import LoggedProcess, stop_all, unique_recording  # noqa: F401 (re-export)
from kvviz.traces.options import SUFFIXES

RUN_SUFFIX = ".db"
VIEWER_SUFFIX = ".viewer"
DEFAULT_LANES = ("contiguous:first-fit:max", "paged:16")


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


def open_run(root: Path, name: str):
    """A kvviz.store.RunReader for recording `name` (raises StoreError / KvvizError)."""
    from kvviz.store.reader import RunReader  # the store pulls in pandas; keep this module light

    return RunReader(resolve_run(root, name))


@dataclass(frozen=True)
class CollectorOptions:
    """Flags for `python -m collectors`; None leaves the collector's own default."""

    mode: str | None = None  # real | sim
    workload: str | None = None  # a kvviz.config.LENGTH_PRESETS name
    lanes: tuple[str, ...] = DEFAULT_LANES
    rate: float | None = None
    capacity_tokens: int | None = None
    hz: float | None = None
    device: str | None = None  # auto | cpu | cuda
    model: str | None = None
    loop: bool = True
    trace: str | None = None  # a trace file to replay instead of `workload` (resolve_trace)

    def __post_init__(self) -> None:
        if self.mode not in (None, "real", "sim"):
            raise ValueError(f"mode: must be 'real' or 'sim', got {self.mode!r}")
        if self.workload is not None and self.workload not in LENGTH_PRESETS:
            raise ValueError(f"workload: unknown preset {self.workload!r}")
        if not self.lanes:
            raise ValueError("lanes: give at least one lane")
        for lane in self.lanes:
            LaneSpec.parse(lane)  # raises ValueError with the reason
        if self.device not in (None, "auto", "cpu", "cuda"):
            raise ValueError(f"device: must be auto, cpu or cuda, got {self.device!r}")

    def argv(self, out: Path) -> list[str]:
        args = ["--out", str(out), "--quiet"]
        for flag, value in (("--mode", self.mode), ("--workload", self.workload),
                            ("--rate", self.rate), ("--capacity-tokens", self.capacity_tokens),
                            ("--hz", self.hz), ("--device", self.device),
                            ("--model", self.model), ("--trace", self.trace)):
            if value is not None:
                args += [flag, str(value)]
        for lane in self.lanes:
            args += ["--lane", lane]
        if any(LaneSpec.parse(lane).prefix_caching for lane in self.lanes):
            args.append("--kv-events-record")  # its own KV-event stream, for the Live page
        return args + (["--loop"] if self.loop else [])


class CollectorStatus(NamedTuple):
    state: str  # "running" | "stopped" | "not started"
    pid: int | None
    returncode: int | None
    recording: str | None  # file name in the runs directory
    last_message: str  # last lines the collector wrote to stderr/stdout
    started_at: float | None


class Collector(LoggedProcess):
    """One demo collector at a time; thread-safe (shared by every browser session)."""

    def __init__(self, root: Path, *, module: str = "collectors", python: str = sys.executable,
                 cwd: Path | None = None) -> None:
        super().__init__()
        self.root, self.module, self.python = root, module, python
        self.cwd = cwd or Path.cwd()
        self.recording: Path | None = None
        self.options: CollectorOptions | None = None
        self.started_at: float | None = None
        self.autostarted = False
        self.viewer: Path | None = None  # touched while a tab shows the live collector
        self._touched = 0.0

    def start(self, options: CollectorOptions) -> Path:
        """Stop any running collector, start a new one writing runs/live-<time>.db.

        The child stops by itself when this process is gone or when no viewer has touched
        its viewer file (touch_viewer) for $KVVIZ_IDLE_STOP_S (kvviz/lifecycle.py)."""
        with self._lock:
            out = unique_recording(self.root, "live", RUN_SUFFIX)
            self._drop_viewer()
            self.viewer = out.with_suffix(VIEWER_SUFFIX)
            self.viewer.touch()
            self._touched = time.monotonic()
            env = {"KVVIZ_PARENT_PID": str(os.getpid()), "KVVIZ_VIEWER_FILE": str(self.viewer)}
            self._launch_locked([self.python, "-m", self.module, *options.argv(out)], out,
                                self.cwd, env)
            self.recording, self.options, self.started_at = out, options, time.time()
            return out

    def touch_viewer(self, every_s: float = 5.0) -> None:
        """A tab shows the live collector: push its idle stop back (at most every `every_s`)."""
        now = time.monotonic()
        if self.viewer is None or now - self._touched < every_s:
            return
        self._touched = now
        try:
            os.utime(self.viewer)
        except OSError:
            pass  # the runs directory went away: the collector then runs to its idle stop

    def _drop_viewer(self) -> None:
        if self.viewer is not None:
            self.viewer.unlink(missing_ok=True)
            self.viewer = None

    def stop(self) -> None:
        super().stop()
        with self._lock:
            self._drop_viewer()

    def idle_stopped(self) -> bool:
        """The collector stopped itself because no one watched it (lifecycle's message)."""
        return self._state()[0] == "stopped" and "no viewer for" in self.last_message()

    def ensure_started(self, options: CollectorOptions) -> None:
        """Start once per process (the first page view), and again when a viewer comes back
        to a collector that stopped for lack of viewers; otherwise do nothing."""
        with self._lock:
            if self.autostarted and not self.idle_stopped():
                return
            self.autostarted = True
        self.start(self.options if self.idle_stopped() and self.options else options)

    def restart(self, options: CollectorOptions | None = None) -> Path:
        return self.start(options or self.options or CollectorOptions())

    def status(self) -> CollectorStatus:
        state, pid, rc = self._state()
        if state == "not started":
            return CollectorStatus(state, None, None, None, "", None)
        return CollectorStatus(state, pid, rc, self.recording.name if self.recording else None,
                               self.last_message(), self.started_at)


def nvml_probe() -> dict:
    """NVML as the dashboard's process sees it: {'ok': bool, 'error': str, 'devices': [...]}."""
    try:
        import pynvml
    except ImportError as exc:
        return {"ok": False, "error": f"pynvml is not installed ({exc})", "devices": []}
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # noqa: BLE001 - NVMLError_* subclasses; report the name plainly
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}", "devices": []}
    try:
        devices = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            mem = pynvml.nvmlDeviceGetMemoryInfo(h)
            name = pynvml.nvmlDeviceGetName(h)
            devices.append({"index": i, "name": name if isinstance(name, str) else name.decode(),
                            "total_bytes": int(mem.total), "used_bytes": int(mem.used),
                            "free_bytes": int(mem.free)})
        return {"ok": True, "error": "", "devices": devices}
    finally:
        pynvml.nvmlShutdown()
