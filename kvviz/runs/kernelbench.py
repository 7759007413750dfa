"""The block-size advisor's kernel side: `kvviz bench attention` timed in a subprocess, cached.

`python -m kvviz bench attention --sweep-block-sizes --json` runs once per machine, torch
version and argument list; its JSON lines become KernelPoints (median, p10, p90 per block
size), cached as JSON under ~/.cache/kvviz (or $KVVIZ_CACHE_DIR). kvviz/runs/advisor.py weighs
them against the memory side. Pure Python (no numpy, no torch in this process).
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from importlib import metadata
from pathlib import Path
from typing import NamedTuple

from kvviz.core.errors import KvvizError

BENCH_ARGS = ("--batch", "8", "--context", "1024", "--repeats", "20", "--rounds", "3")
BENCH_TIMEOUT_S = 600.0
KERNELS = 2  # in the cache key: 2 = the CPU's numba kernel reads blocks in place (1 gathered)


class BenchError(KvvizError):
    """The kernel benchmark could not be run or its output could not be read."""


class KernelPoint(NamedTuple):
    block_size: int
    paged_ms: float  # median
    contiguous_ms: float
    paged_p10: float = -1.0  # -1: not measured (then the median stands for both)
    paged_p90: float = -1.0

    @property
    def low(self) -> float:
        return self.paged_p10 if self.paged_p10 >= 0 else self.paged_ms

    @property
    def high(self) -> float:
        return self.paged_p90 if self.paged_p90 >= 0 else self.paged_ms

    @property
    def spread(self) -> float:
        """(p90 - p10) / median."""
        return (self.high - self.low) / self.paged_ms if self.paged_ms > 0 else 0.0


class BenchResult(NamedTuple):
    points: tuple[KernelPoint, ...]
    key: dict  # machine, torch version, device, args
    measured_at: str
    from_cache: bool
    device_name: str = ""  # the GPU's (cuda) or CPU's model name, as the bench reported it
    threads: int | None = None  # torch threads the bench ran with, as it reported


def bench_threads() -> int:
    """The torch thread count the advisor's bench runs with: fixed per machine (at most 4,
    so a shared machine's other work disturbs it less), and named in its cache key."""
    return max(1, min(4, os.cpu_count() or 1))


def bench_command(device: str = "cpu", args: Sequence[str] = BENCH_ARGS,
                  threads: int | None = None) -> list[str]:
    return [sys.executable, "-m", "kvviz", "bench", "attention", "--sweep-block-sizes",
            "--json", "--device", device, "--threads", str(threads or bench_threads()), *args]


def describe(command: Sequence[str], result: BenchResult) -> str:
    """Where timings came from, e.g. 'cpu (x86_64, torch 2.13.0, 4 torch threads, median of 60
    runs)'."""
    args = list(command)

    def flag(name: str, default: str) -> str:
        return args[args.index(name) + 1] if name in args[:-1] else default

    runs = int(flag("--repeats", "20")) * int(flag("--rounds", "1"))
    device = flag("--device", "cpu") + (f" {result.device_name}" if result.device_name else "")
    threads = result.threads if result.threads else flag("--threads", "default")
    return (f"{device} ({result.key.get('machine', '?')}, torch "
            f"{result.key.get('torch', '?')}, {threads} torch threads, "
            f"median of {runs} runs per block size)")


def cache_dir() -> Path:
    return Path(os.environ.get("KVVIZ_CACHE_DIR") or Path.home() / ".cache" / "kvviz")


def _torch_version() -> str:
    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return "none"


def cache_key(command: Sequence[str]) -> dict:
    """What a measurement depends on: this machine, its torch, and the bench arguments."""
    return {"node": platform.node(), "machine": platform.machine(),
            "python": platform.python_version(), "torch": _torch_version(),
            "kernels": KERNELS, "args": list(command[3:])}


def cache_path(key: dict, directory: Path | None = None) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return (directory or cache_dir()) / f"bench-attention-{digest}.json"


def parse_bench_output(text: str) -> tuple[KernelPoint, ...]:
    """KernelPoints from the bench's JSON lines (other lines are ignored), sorted by size."""
    points = {}
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            obj = json.loads(line)
            p = KernelPoint(int(obj["block_size"]), float(obj["paged_ms"]),
                            float(obj["contiguous_ms"]), float(obj.get("paged_ms_p10", -1.0)),
                            float(obj.get("paged_ms_p90", -1.0)))
        except (json.JSONDecodeError, KeyError, TypeError, ValueError):
            continue
        if p.block_size >= 1 and p.paged_ms > 0:
            points[p.block_size] = p
    if not points:
        raise BenchError("the kernel benchmark printed no block-size results")
    return tuple(points[b] for b in sorted(points))


def bench_environment(text: str) -> tuple[str, int | None]:
    """(device name, torch threads) from the first bench JSON line that names them."""
    for line in text.splitlines():
        try:
            obj = json.loads(line) if line.strip().startswith("{") else None
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict) and "threads" in obj:
            threads = obj.get("threads")
            return (str(obj.get("device_name") or "")[:80],
                    int(threads) if isinstance(threads, int) and threads > 0 else None)
    return "", None


def load_cached(key: dict, directory: Path | None = None) -> BenchResult | None:
    path = cache_path(key, directory)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        points = tuple(KernelPoint(*p) for p in data["points"])
        if data["key"] != key or not points:
            return None
        threads = data.get("threads")
        return BenchResult(points, key, str(data.get("measured_at", "")), True,
                           str(data.get("device_name") or "")[:80],
                           threads if isinstance(threads, int) and threads > 0 else None)
    except (OSError, ValueError, KeyError, TypeError):
        return None  # missing or unreadable: measure again


Runner = Callable[..., "subprocess.CompletedProcess[str]"]


def measure(command: Sequence[str], directory: Path | None = None, refresh: bool = False,
            runner: Runner = subprocess.run, timeout_s: float = BENCH_TIMEOUT_S) -> BenchResult:
    """Cached result for this machine, else run the bench once and cache it."""
    key = cache_key(command)
    if not refresh:
        hit = load_cached(key, directory)
        if hit is not None:
            return hit
    try:
        proc = runner(list(command), capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.SubprocessError) as exc:
        raise BenchError(f"could not run the kernel benchmark: {exc}") from None
    if proc.returncode != 0:
        last = (proc.stderr or proc.stdout or "").strip().splitlines()[-1:] or ["no output"]
        raise BenchError(f"the kernel benchmark exited with status {proc.returncode}: {last[0]}")
    points = parse_bench_output(proc.stdout)
    device_name, threads = bench_environment(proc.stdout)
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    path = cache_path(key, directory)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"key": key, "measured_at": stamp, "device_name": device_name,
                                   "threads": threads, "points": [list(p) for p in points]}),
                       encoding="utf-8")
        tmp.replace(path)
    except OSError:
        pass  # a read-only home still gets the result, just not cached
    return BenchResult(points, key, stamp, False, device_name, threads)
