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


def test_the_script_prints_kvviz_and_the_floors_as_json() -> None:
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_prefix_floor.py"),
                          "--quick", "--json", "--repeats", "1"], capture_output=True,
                         text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    assert [r["case"] for r in rows] == ["kvviz", "plain_loop", "block_floor", "sketch_walk"]
    assert all(r["seconds"] > 0 and "machine" in r for r in rows)
    totals = rows[-1]["totals"]  # the sketch walks the whole stream, as kvviz does
    assert totals["sketch"]["steps"] > 0 and totals["kvviz"]["steps"] > 0
    assert 0 < totals["sketch"]["hit_rate"] < 1 and 0 < totals["kvviz"]["prefix_hit_rate"] < 1


def test_the_sketch_walk_serves_a_shared_prompt_from_the_cache() -> None:
    """Two requests with one 64-token prompt chain, the second arriving after the first has
    finished: the second hits the first's three whole prompt blocks (never the last token's),
    48 of its 64 known tokens; nothing is preempted in a cache this large."""
    code = ("import json, harness, numpy as np; "  # harness: the checkout on sys.path
            "from kvviz.core.workload import Workload; "
            "from prefix_sketch import walk; "
            "w = Workload(np.zeros(2), np.array([64, 64]), np.array([3, 3]), np.zeros(2, int), "
            "chain_ptr=np.array([0, 4, 8]), chain_ids=np.array([1, 2, 3, 4, 1, 2, 3, 4]), "
            "chain_block=16); print(json.dumps(walk(w, [1, 10], 64)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, cwd=ROOT / "benchmarks")
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["finished"] == 2 and got["preemptions"] == 0
    assert got["hit_rate"] == 48 / (64 + 64)
