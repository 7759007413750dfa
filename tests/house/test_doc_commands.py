"""README's `kvviz simulate` commands, taken from the markdown and run in bash as written: what
the dashboard shows first, and the five-allocator example, whose table must show the lesson
the README draws from it. (docs/NODE.md's commands: tests/real_vllm/test_node_docs.py.)"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
COLUMNS = ("steps", "used", "resv", "intern", "free", "tail", "extfrag", "prefix", "CAP",
           "FRAG", "POL", "preempt", "clipped")


def readme_commands() -> list[str]:
    blocks = re.findall(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)
    return [b for b in blocks if b.startswith("kvviz simulate") and "--trace" not in b]


def run_as_written(cmd: str) -> dict[str, dict[str, float]]:
    """Run `cmd` in bash (kvviz from this checkout) -> lane -> its "all steps" row."""
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PYTHONPATH": str(ROOT),
           "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    out = subprocess.run(["bash", "-c", cmd], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    rows, lane = {}, None
    for line in out.stdout.splitlines():
        if line and not line.startswith(" ") and ":" in line and " " not in line.strip():
            lane = line.strip()
        elif line.strip().startswith("all steps") and lane:
            vals = line.split()[2:]
            rows[lane] = {k: float(v.rstrip("%").replace(",", "")) for k, v in zip(COLUMNS,
                                                                                   vals)}
    assert rows, out.stdout[-2000:]
    return rows


def test_the_readme_has_both_commands():
    cmds = readme_commands()
    assert "kvviz simulate --max-num-seqs 24\n" in cmds
    assert any("--lane paged:16:prefix" in c for c in cmds)


def test_what_the_dashboard_shows_first_meets_every_class_of_failure():
    from kvviz.runs.jobs import DEMO
    assert DEMO.max_num_seqs == 24  # the README's flag is the demo's one difference
    rows = run_as_written("kvviz simulate --max-num-seqs 24")
    pow2, mx, paged = (rows[k] for k in ("contiguous:first-fit:pow2", "contiguous:first-fit:max",
                                         "paged:16"))
    assert pow2["FRAG"] > 0 and pow2["CAP"] > 0
    assert mx["CAP"] > 0 and mx["FRAG"] == 0
    assert paged["POL"] > 0 and paged["FRAG"] == 0


@pytest.mark.parametrize("cmd", [c for c in readme_commands() if "paged:16:prefix" in c])
def test_the_five_allocator_example_shows_its_lesson(cmd):
    rows = run_as_written(cmd)
    mx, exact, buddy = (rows[f"contiguous:{k}"] for k in ("first-fit:max", "first-fit:exact",
                                                          "buddy:pow2"))
    paged, prefix = rows["paged:16"], rows["paged:16:prefix"]
    assert mx["intern"] >= 40 and mx["CAP"] > 1000  # about half internal; refused
    assert exact["intern"] < 1 and exact["extfrag"] >= 0.6 and exact["FRAG"] >= 100
    assert buddy["intern"] > 10 and buddy["FRAG"] > 0
    assert paged["used"] >= 85 and paged["FRAG"] == 0 and paged["preempt"] > 0
    assert all(paged["steps"] < 0.65 * r["steps"] for r in (mx, exact, buddy))
    assert paged["steps"] < 0.4 * mx["steps"]
    assert 30 <= prefix["prefix"] <= 50 and prefix["steps"] < paged["steps"]
