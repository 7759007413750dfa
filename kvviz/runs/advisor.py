"""Block-size advisor: memory side (simulated tail waste, failures) against kernel time.

Pure Python (no numpy, no pandas, no torch): the kernel side comes from running
`python -m kvviz bench attention --sweep-block-sizes --json` in a subprocess, once per machine
and torch version, cached as JSON under ~/.cache/kvviz (or $KVVIZ_CACHE_DIR).

Kernel timings are medians of repeated runs (`--rounds` sweeps of `--repeats` runs each, a
fixed torch thread count) with their 10th and 90th percentiles. A block size is *slower* than
the fastest only when its median is more than `kernel_tolerance` above the fastest median AND
its p10 lies above the fastest block's p90: a difference inside the noise never decides.

Rule: among block sizes that are not slower and whose tail waste share stays at or under
`waste_limit`, pick the largest (shortest block tables: fewer entries for the kernel and the
scheduler to walk; the waste limit already bounds what larger blocks cost in memory). If none
meets both, the waste limit wins: the fastest block under it. If no block is under it, the
least wasteful of the fast blocks. Without kernel timings: the largest block under the waste
limit. The reason names the device the timings came from.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from importlib import metadata
from pathlib import Path
from typing import NamedTuple

from kvviz.core.errors import KvvizError

BLOCK_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
BENCH_ARGS = ("--batch", "8", "--context", "1024", "--repeats", "20", "--rounds", "3")
NOISY_SPREAD = 0.25  # (p90 - p10) / median above this: the point is called noisy
BENCH_TIMEOUT_S = 600.0


class BenchError(KvvizError):
    """The kernel benchmark could not be run or its output could not be read."""


class MemoryPoint(NamedTuple):
    block_size: int
    tail_waste_share: float  # of capacity, mean over memory-pressure steps (else all steps)
    internal_share: float
    admit_failures: int  # CAPACITY + FRAGMENTATION + POLICY
    preemptions: int
    steps: int
    prefix_hit_rate: float = 0.0  # prompt tokens served from the prefix cache (prefix lanes)


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


class Advice(NamedTuple):
    block_size: int | None
    reason: str  # one sentence
    candidates: tuple[int, ...]  # block sizes that met both limits


class BenchResult(NamedTuple):
    points: tuple[KernelPoint, ...]
    key: dict  # machine, torch version, device, args
    measured_at: str
    from_cache: bool
    device_name: str = ""  # the GPU's name for cuda timings, as the bench reported it
    threads: int | None = None  # torch threads the bench ran with, as it reported


def sweep_labels(block_sizes: Iterable[int] = BLOCK_SIZES, prefix: bool = False) -> list[str]:
    """Lane labels for a memory sweep, e.g. ['paged:1', 'paged:2', ...]."""
    return [f"paged:{bs}" + (":prefix" if prefix else "") for bs in block_sizes]


def memory_point(summary: dict) -> MemoryPoint:
    """Read one lane summary of kvviz.engine.Simulation.run."""
    pressure = summary.get("pressure_step_shares")  # None: never under memory pressure
    tail = summary["tail_waste_share"] if pressure is None else pressure["tail_waste"]
    internal = summary["internal_share"] if pressure is None else pressure["internal"]
    return MemoryPoint(int(summary["block_size"]), float(tail), float(internal),
                       int(sum(summary["admit_failures"].values())),
                       int(summary["preemptions"]), int(summary["steps"]),
                       float(summary.get("prefix_hit_rate", 0.0)))


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _noise_note(ker: dict[int, KernelPoint]) -> str:
    noisy = [b for b in sorted(ker) if ker[b].spread > NOISY_SPREAD]
    if not noisy:
        return ""
    return (f" Timings of block{'s' if len(noisy) > 1 else ''} "
            f"{', '.join(map(str, noisy))} are noisy (p10-p90 spread over "
            f"{_pct(NOISY_SPREAD)} of the median): measure again on a quiet machine.")


def recommend(memory: Sequence[MemoryPoint], kernel: Sequence[KernelPoint] | None = None,
              kernel_tolerance: float = 0.10, waste_limit: float = 0.05,
              source: str = "") -> Advice:
    """A block size and the reason. Kernel data may be missing or partial; `source` names
    where the timings came from (device, threads, runs) and ends the reason."""
    if kernel_tolerance < 0 or waste_limit < 0:
        raise ValueError("kernel_tolerance and waste_limit must be >= 0")
    mem = {m.block_size: m for m in memory}
    if not mem:
        return Advice(None, "No memory sweep yet: nothing to recommend.", ())
    ker = {k.block_size: k for k in kernel or () if k.block_size in mem}
    lean = sorted(bs for bs, m in mem.items() if m.tail_waste_share <= waste_limit)
    if not ker:
        if not lean:
            bs = min(mem, key=lambda b: (mem[b].tail_waste_share, b))
            return Advice(bs, f"Without kernel timings, and with no block size under "
                          f"{_pct(waste_limit)} tail waste, block {bs} wastes least "
                          f"({_pct(mem[bs].tail_waste_share)}).", ())
        bs = lean[-1]
        return Advice(bs, f"Without kernel timings: block {bs} is the largest (shortest block "
                      f"tables) whose tail waste stays under {_pct(waste_limit)} "
                      f"({_pct(mem[bs].tail_waste_share)}).", tuple(lean))
    best = min(ker, key=lambda b: (ker[b].paged_ms, b))
    best_ms = ker[best].paged_ms

    def slower(b: int) -> bool:
        return (ker[b].paged_ms > best_ms * (1 + kernel_tolerance)
                and ker[b].low > ker[best].high)

    fast = sorted(b for b in ker if not slower(b))
    both = tuple(b for b in fast if b in lean)
    tail = _noise_note(ker) + (f" Kernel timings from {source}." if source else "")
    if both:
        bs = both[-1]
        m = mem[bs]
        k = ker[bs]
        return Advice(bs, f"Block {bs} is the largest block (shortest block tables) whose "
                      f"tail waste stays under {_pct(waste_limit)} "
                      f"({_pct(m.tail_waste_share)}; {m.preemptions} preemptions, "
                      f"{m.admit_failures} admission failures) and whose decode-attention "
                      f"time ({k.paged_ms:.3g} ms, p10-p90 {k.low:.3g}-{k.high:.3g}) is not "
                      f"slower than the best ({best_ms:.3g} ms at block {best}) by more than "
                      f"{_pct(kernel_tolerance)} and the noise; blocks "
                      f"{', '.join(map(str, both))} all qualify." + tail, both)
    lean_timed = [b for b in lean if b in ker]
    if lean_timed:
        bs = min(lean_timed, key=lambda b: (ker[b].paged_ms, b))
        slow = ker[bs].paged_ms / best_ms - 1
        return Advice(bs, f"Every block size under {_pct(waste_limit)} tail waste has a kernel "
                      f"time more than {_pct(kernel_tolerance)} (and the noise) above the best "
                      f"({best_ms:.3g} ms at block {best}); block {bs} is the fastest of those "
                      f"({ker[bs].paged_ms:.3g} ms, {_pct(slow)} slower; tail waste "
                      f"{_pct(mem[bs].tail_waste_share)})." + tail, ())
    bs = min(fast, key=lambda b: (mem[b].tail_waste_share, b))
    return Advice(bs, f"No block size stays under {_pct(waste_limit)} tail waste; among the "
                  f"blocks not slower than the fastest kernel, block {bs} wastes least "
                  f"({_pct(mem[bs].tail_waste_share)})." + tail, ())


def bench_threads() -> int:
    """The torch thread count the advisor's bench runs with: fixed per machine (at most 4,
    so a shared machine's other work disturbs it less), and named in its cache key."""
    return max(1, min(4, os.cpu_count() or 1))


# ---- kernel side: subprocess + disk cache ---------------------------------------------------
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
            "args": list(command[3:])}


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
