"""benchmarks/bench_prefix_floor.py runs (its --quick sizes) and its block floor does the work
its docstring counts: every key stored, each block's previous key evicted."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_block_floor_keeps_one_key_per_block_it_filled() -> None:
    code = ("from bench_prefix_floor import block_floor; "
            "print(block_floor(10, 4), block_floor(3, 4))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, cwd=ROOT / "benchmarks")  # (run from there, as scripts)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["4", "3"]  # 10 keys into 4 blocks: 6 evicted


def test_the_script_prints_both_floors_as_json() -> None:
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_prefix_floor.py"),
                          "--quick", "--json", "--repeats", "1"], capture_output=True,
                         text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    assert [r["case"] for r in rows] == ["plain_loop", "block_floor"]
    assert all(r["seconds"] > 0 and "machine" in r for r in rows)
