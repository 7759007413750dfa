"""kvviz.viz.gpu: device memory series and the reason when NVML gave nothing."""
from __future__ import annotations

import pandas as pd

from kvviz.viz import gpu as vg

UNAVAILABLE = pd.DataFrame([{"t": 0.0, "device_index": -1, "nvml_status": "unavailable",
                             "nvml_reason": "no NVIDIA driver: libnvidia-ml.so not found",
                             "process_rss_bytes": 2**28, "kv_pool_bytes": 2**25}])


def test_reason_from_unavailable_rows():
    assert "no NVIDIA driver" in vg.nvml_reason(UNAVAILABLE)


def test_reason_from_meta_wins():
    meta = {"nvml": {"status": "unavailable", "reason": "NVMLError_LibraryNotFound"}}
    assert vg.nvml_reason(UNAVAILABLE, meta) == "NVMLError_LibraryNotFound"


def test_no_reason_when_nvml_worked():
    df = pd.DataFrame([{"t": 0.0, "device_index": 0, "nvml_status": "ok", "nvml_reason": "",
                        "nvml_total_bytes": 8 * 2**30, "nvml_used_bytes": 2**30}])
    assert vg.nvml_reason(df) is None
    assert vg.devices(df) == [0]


def test_empty_recording_says_so():
    assert "no NVML samples" in vg.nvml_reason(pd.DataFrame())


def test_figure_draws_nvml_and_torch_series_in_gib():
    df = pd.DataFrame([{"t": float(i), "device_index": 0, "nvml_status": "ok",
                        "nvml_total_bytes": 8 * 2**30, "nvml_used_bytes": (i + 1) * 2**30,
                        "torch_allocated_bytes": 2**29, "kv_pool_bytes": 2**29}
                       for i in range(3)])
    fig = vg.device_memory_figure(df)
    by_name = {tr.name: list(tr.y) for tr in fig.data}
    assert by_name["device used"] == [1.0, 2.0, 3.0]
    assert by_name["torch allocated"] == [0.5] * 3 and "KV pools (all lanes)" in by_name


def test_figure_without_nvml_says_no_readings_and_draws_the_pool_line():
    fig = vg.device_memory_figure(UNAVAILABLE.assign(kv_pool_bytes=0), kv_pool_bytes=2**30)
    texts = [a.text for a in fig.layout.annotations]
    assert "no NVML readings" in texts
    assert any(s.y0 == 1.0 for s in fig.layout.shapes)


def test_figure_keeps_one_device():
    df = pd.DataFrame([{"t": 0.0, "device_index": d, "nvml_used_bytes": (d + 1) * 2**30}
                       for d in (0, 1)])
    fig = vg.device_memory_figure(df, device=1)
    assert [list(tr.y) for tr in fig.data] == [[2.0]]
