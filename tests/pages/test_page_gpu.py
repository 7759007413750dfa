"""GPU: where NVML is unavailable the page says why, plainly."""
from __future__ import annotations

from pathlib import Path

from kvviz.store.writer import RunWriter
from tests.pages.pagehelpers import figures, no_exception, page


def test_unavailable_nvml_is_explained(runs):
    at = page("pages/gpu.py", run="rec.db")
    no_exception(at)
    assert any("NVMLError_LibraryNotFound" in w.value for w in at.warning)
    machine = " ".join(i.value for i in at.info) + " ".join(s.value for s in at.success)
    assert "NVML" in machine
    assert not at.error
    told = " ".join(m.value for m in at.markdown)  # on a CPU machine: what it would show
    if "NVMLError" in machine or "unavailable" in machine:
        assert "What this page shows on a machine with an NVIDIA GPU" in told


def test_device_memory_series_are_drawn(runs: Path):
    w = RunWriter(runs / "gpu.db", {"mode": "real", "device": "cuda", "lanes": [
        {"name": "paged:16", "capacity_tokens": 1024, "bytes_per_token": 4096}]})
    for i in range(5):
        w.add_device_memory(float(i), {"device_index": 0, "nvml_status": "ok",
                                       "nvml_reason": "", "nvml_total_bytes": 80 * 2**30,
                                       "nvml_used_bytes": (10 + i) * 2**30,
                                       "torch_allocated_bytes": 4 * 2**30,
                                       "kv_pool_bytes": 4 * 2**30})
    w.close()
    at = page("pages/gpu.py", run="gpu.db")
    no_exception(at)
    assert not at.warning and not at.error
    names = {tr.get("name") for f in figures(at) for tr in f["data"]}
    assert {"device used", "torch allocated", "KV pools (all lanes)"} <= names
    assert any(m.value == "4.0 MiB" for m in at.get("metric"))
