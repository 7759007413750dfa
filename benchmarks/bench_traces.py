"""Trace parsing throughput: rows per second for each public format, from a file on disk.

Writes synthetic files in the published layouts (Azure CSV with 7-digit fractional timestamps,
BurstGPT CSV, Mooncake JSONL, kvviz CSV) of --rows rows to a temp dir, reads each --repeat
times with `kvviz.traces.read_trace` and reports the best wall and CPU time (on a shared
machine the CPU time says more). Target: >= 1M rows/s for the CSV formats.
`python benchmarks/bench_traces.py [--rows 1000000] [--repeat 3] [--json]`
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kvviz.traces import read_trace  # noqa: E402


def write_samples(d: Path, n: int) -> dict[str, Path]:
    rng = np.random.default_rng(0)
    p = rng.integers(1, 8000, n)
    o = rng.integers(0, 2000, n) + 1
    gaps = rng.integers(0, 3_000_000, n)  # 100 ns ticks
    ticks = np.cumsum(gaps) + 1
    base = np.datetime64("2023-11-16T18:15:46", "s")
    secs = ticks // 10_000_000
    frac = ticks % 10_000_000
    stamps = np.datetime_as_string(base + secs.astype("m8[s]"), unit="s")
    stamps = np.char.replace(stamps, "T", " ")
    out = {}
    out["azure"] = d / "azure.csv"
    with out["azure"].open("w") as fh:
        fh.write("TIMESTAMP,ContextTokens,GeneratedTokens\n")
        fh.writelines(f"{s}.{f:07d},{a},{b}\n" for s, f, a, b in zip(stamps, frac, p, o))
    t = ticks / 1e7
    out["burstgpt"] = d / "burstgpt.csv"
    with out["burstgpt"].open("w") as fh:
        fh.write("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n")
        fh.writelines(f"{x:.3f},{'ChatGPT' if a % 3 else 'GPT-4'},{a},{b},{a + b},"
                      "Conversation log\n" for x, a, b in zip(t, p, o))
    out["kvviz-csv"] = d / "kvviz.csv"
    with out["kvviz-csv"].open("w") as fh:
        fh.write("arrival_s,prompt_tokens,output_tokens,prefix_group\n")
        fh.writelines(f"{x!r},{a},{b},-1\n" for x, a, b in zip(t.tolist(), p, o))
    out["mooncake"] = d / "mooncake.jsonl"
    with out["mooncake"].open("w") as fh:
        m = min(n, 200_000)  # JSON is slower; a smaller file is enough for its rate
        fh.writelines(
            json.dumps({"timestamp": int(x * 1000), "input_length": int(a),
                        "output_length": int(b), "hash_ids": list(range(-(-int(a) // 512)))})
            + "\n" for x, a, b in zip(t[:m], p[:m], o[:m]))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        files = write_samples(Path(tmp), a.rows)
        res = {}
        for fmt, path in files.items():
            best = cpu = float("inf")
            for _ in range(a.repeat):
                t0, c0 = time.perf_counter(), time.process_time()
                w, info = read_trace(path)
                best = min(best, time.perf_counter() - t0)
                cpu = min(cpu, time.process_time() - c0)
            res[fmt] = {"rows": info.rows_read, "seconds": round(best, 4),
                        "rows_per_s": int(info.rows_read / best),
                        "cpu_seconds": round(cpu, 4),  # a shared machine's wall clock lies
                        "rows_per_cpu_s": int(info.rows_read / max(cpu, 1e-9)),
                        "mb": round(path.stat().st_size / 2**20, 1)}
    out = {"bench": "traces", "machine": platform.processor() or platform.machine(),
           "python": platform.python_version(), "numpy": np.__version__, "formats": res}
    if a.json:
        print(json.dumps(out))
        return
    for fmt, r in res.items():
        print(f"{fmt:<10} {r['rows']:>9} rows {r['mb']:>7} MB {r['seconds']:>8.3f} s "
              f"{r['rows_per_s']:>11,} rows/s {r['rows_per_cpu_s']:>11,} rows/CPU-s")


if __name__ == "__main__":
    main()
