"""Device memory: NVML absent on this machine is recorded plainly; real mode on CPU runs."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from kvviz.node.nvml import NvmlProbe
from kvviz.store.reader import RunReader
from tests.collectors.conftest import collect


def _nvml_present() -> bool:
    return NvmlProbe().status == "ok"


@pytest.mark.skipif(_nvml_present(), reason="this machine has a working NVML")
def test_nvml_absent_is_a_status_not_an_error() -> None:
    probe = NvmlProbe()
    assert probe.status == "unavailable" and probe.reason
    (rec,) = probe.sample()
    assert rec == {"device_index": -1, "nvml_status": "unavailable", "nvml_reason": probe.reason}
    probe.close()


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch not installed")
def test_real_mode_on_cpu_records_pools_and_nvml_status(tmp_path: Path) -> None:
    try:
        import kvviz.kv.real  # noqa: F401
    except ImportError as exc:
        pytest.skip(f"kvviz.kv.real is not importable yet: {exc}")
    out = tmp_path / "real.db"
    assert collect("--mode", "real", "--device", "cpu", "--quiet", "--duration", "2",
                   "--rate", "20", "--steps-per-s", "0", "--out", str(out)) == 0
    r = RunReader(out)
    assert (r.meta["mode"], r.meta["device"], r.meta["model"]["name"]) == (
        "real", "cpu", "tiny-cpu")
    dm = r.device_memory()
    per_token = r.meta["model"]["kv_bytes_per_token"]
    assert (dm.kv_pool_bytes >= 2 * 16384 * per_token).all()
    assert dm.process_rss_bytes.gt(0).all()
    if not _nvml_present():
        assert set(dm.nvml_status) == {"unavailable"} and dm.nvml_reason.str.len().gt(0).all()
        assert r.meta["nvml"]["status"] == "unavailable"
    assert r.samples().tokens_generated.max() > 0
