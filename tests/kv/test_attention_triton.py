"""The Triton kernels vs the SDPA reference: interpreter on CPU, and CUDA when present.

The interpreter needs TRITON_INTERPRET=1 before triton's first import, so those cases run in
one subprocess (triton_cases.py) per session and each case is reported as its own test.
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.kv.triton_cases import CASES, CUDA_CASES, run

HERE = Path(__file__).parent
ROOT = HERE.parents[1]
pytestmark = pytest.mark.triton
HAS_TRITON = importlib.util.find_spec("triton") is not None


@pytest.fixture(scope="module")
def interpreted() -> dict[str, dict]:
    if not HAS_TRITON:
        pytest.skip("triton is not installed")
    env = {**os.environ, "TRITON_INTERPRET": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, str(HERE / "triton_cases.py")], env=env,
                          capture_output=True, text=True, timeout=300, cwd=HERE, check=False)
    results = {}
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            r = json.loads(line)
            results[r["case"]] = r
    if not results:
        pytest.fail(f"interpreter run produced no results (rc={proc.returncode}):\n"
                    f"{proc.stderr[-3000:]}")
    return results


@pytest.mark.parametrize("case", list(CASES))
def test_interpreter(case, interpreted):
    r = interpreted.get(case)
    assert r is not None, f"{case} did not run (the subprocess died before it?)"
    assert r["ok"], r.get("error")


def _cuda_reason() -> str | None:
    if not HAS_TRITON:
        return "triton is not installed"
    if os.environ.get("TRITON_INTERPRET") == "1":
        return "TRITON_INTERPRET=1 is set in this process"
    if not torch.cuda.is_available():
        return "no CUDA device"
    return None


@pytest.mark.parametrize("case", [*CASES, *CUDA_CASES])
def test_cuda(case):
    reason = _cuda_reason()
    if reason:
        pytest.skip(f"Triton on CUDA not checked: {reason}")
    [r] = run([case], "cuda")
    assert r["ok"], r.get("error")
