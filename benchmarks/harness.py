"""The one harness every benchmark script uses: the same flags, medians, interleaved A/B, JSON.

Each script builds its parser with `parser(doc)` (flags `--repeats N`, `--json`, `--quick`),
times callables with `median_s` or, when it compares variants, with `interleaved` (rounds
alternate the variants, so this VM's drift of 10-40% over minutes hits every side alike),
and prints every result with `emit` (one JSON object per line with `--json`, else a table
row). `machine()` describes where a figure was measured and the 1-minute load average at
that moment; every JSON line carries it.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as `python benchmarks/x.py` from a checkout
    sys.path.insert(0, str(ROOT))


def parser(doc: str | None, repeats: int | None = 5) -> argparse.ArgumentParser:
    """An ArgumentParser with the shared flags; the doc's first line is its description.
    repeats=None: `--repeats` defaults to None and the script picks a default per case."""
    ap = argparse.ArgumentParser(description=(doc or "").strip().splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=doc)
    ap.add_argument("--repeats", type=int, default=repeats,
                    help="timed runs per variant; the median is reported (default "
                         f"{repeats if repeats is not None else 'per case'})")
    ap.add_argument("--json", action="store_true", help="one JSON object per line")
    ap.add_argument("--quick", action="store_true",
                    help="small sizes, to check that the script runs (figures not comparable)")
    return ap


def machine() -> dict:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    out = {"cpu": cpu, "cores": os.cpu_count(), **_cpu_details(),
           "python": platform.python_version(), "load_avg_1m": round(os.getloadavg()[0], 2)}
    for mod in ("numpy", "torch", "streamlit"):
        if mod in sys.modules:
            out[mod] = getattr(sys.modules[mod], "__version__", "?")
    return out


def _cpu_details() -> dict:
    """What the kernel says of CPU 0: its cache sizes (sysfs) and whether it has AVX-512."""
    out = {}
    base = Path("/sys/devices/system/cpu/cpu0/cache")
    try:
        for d in sorted(base.glob("index*")):
            kind = (d / "type").read_text().strip()
            if kind != "Instruction":
                out[f"l{(d / 'level').read_text().strip()}"] = (d / "size").read_text().strip()
        flags = next((ln for ln in Path("/proc/cpuinfo").read_text().splitlines()
                      if ln.startswith("flags")), "")
        out["avx512"] = " avx512f" in flags
    except OSError:
        pass
    return out


def median_s(fn: Callable[[], object], repeats: int, warmup: int = 1) -> float:
    """Median wall seconds of `repeats` calls of fn, after `warmup` untimed calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(max(1, repeats)):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def interleaved(variants: dict[str, Callable[[], object]], rounds: int,
                warmup: int = 1, clock: Callable[[], float] = time.perf_counter
                ) -> dict[str, list[float]]:
    """Seconds of each variant per round by `clock` (wall time unless told, e.g.
    time.process_time: this process's CPU time, which other work on the machine disturbs
    less); every round runs every variant once, in an order rotated by the round number."""
    names = list(variants)
    for _ in range(warmup):
        for n in names:
            variants[n]()
    out: dict[str, list[float]] = {n: [] for n in names}
    for r in range(max(1, rounds)):
        k = r % len(names)
        for n in names[k:] + names[:k]:
            t0 = clock()
            variants[n]()
            out[n].append(clock() - t0)
    return out


def emit(args: argparse.Namespace, record: dict, text: str | None = None) -> None:
    """Print one result: a JSON line (with the machine) under --json, else `text` or a
    `key=value` line."""
    if args.json:
        print(json.dumps({**record, "machine": machine()}), flush=True)
    else:
        print(text if text is not None else "  ".join(
            f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in record.items()),
            flush=True)
