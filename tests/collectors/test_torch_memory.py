"""The process's RSS with and without psutil (the GPU check's image has none)."""
from __future__ import annotations

import numpy as np
import psutil
import pytest

from collectors import torch_memory


def test_without_psutil_the_rss_comes_from_proc_and_agrees_with_psutil(monkeypatch) -> None:
    grow = np.ones(64 * 2**20 // 8)  # 64 MiB resident: both readings must see it
    monkeypatch.setattr(torch_memory, "psutil", None)
    proc = torch_memory.sample("cpu")["process_rss_bytes"]
    real = psutil.Process().memory_info().rss
    assert abs(proc - real) < 8 * 2**20, (proc, real)
    assert proc > grow.nbytes
    del grow


def test_without_psutil_or_proc_the_error_says_what_to_install(monkeypatch) -> None:
    monkeypatch.setattr(torch_memory, "psutil", None)

    def no_proc(*_a, **_k):
        raise FileNotFoundError("/proc/self/statm")

    monkeypatch.setattr("builtins.open", no_proc)
    with pytest.raises(RuntimeError, match="pip install psutil"):
        torch_memory.sample("cpu")
