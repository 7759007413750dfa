"""Device memory over time (RunReader.device_memory): NVML and torch against the KV pool.

Columns read (bytes; a missing one is skipped): nvml_total_bytes, nvml_used_bytes,
nvml_free_bytes, nvml_reserved_bytes, nvml_process_used_bytes, torch_allocated_bytes,
torch_reserved_bytes, torch_max_allocated_bytes, kv_pool_bytes, process_rss_bytes; any other
*_bytes column is drawn under its own name. Rows whose nvml_status is not "ok" carry the
reason in nvml_reason (the collector's NvmlProbe); device_index tells devices apart.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from kvviz.viz import theme

GIB = float(2**30)
NVML_SERIES = {  # column -> (key in theme.DEVICE_COLOURS, label)
    "nvml_total_bytes": ("total", "device total"),
    "nvml_used_bytes": ("used", "device used"),
    "nvml_free_bytes": ("free", "device free"),
    "nvml_reserved_bytes": ("reserved", "driver reserved"),
    "nvml_process_used_bytes": ("process", "collector process (NVML)"),
}
TORCH_SERIES = {
    "torch_allocated_bytes": ("torch_allocated", "torch allocated"),
    "torch_reserved_bytes": ("torch_reserved", "torch reserved (caching allocator)"),
    "torch_max_allocated_bytes": ("torch_peak", "torch peak allocated"),
    "kv_pool_bytes": ("kv_pool", "KV pools (all lanes)"),
    "process_rss_bytes": ("rss", "collector RSS (host memory)"),
}


def nvml_reason(df: pd.DataFrame, meta: dict | None = None) -> str | None:
    """Why NVML gave no readings (in plain words), or None when it worked."""
    nv = (meta or {}).get("nvml")
    if isinstance(nv, dict) and nv.get("status") not in (None, "ok"):
        return str(nv.get("reason") or nv.get("status"))
    if "nvml_status" in df:
        bad = df[df["nvml_status"].astype(str) != "ok"]
        if len(bad) == len(df) and len(df):
            last = bad.iloc[-1]
            return str(last.get("nvml_reason") or last["nvml_status"])
    if "nvml_error" in df:
        errs = df["nvml_error"].dropna().astype(str)
        errs = errs[errs.str.len() > 0]
        if len(errs):
            return str(errs.iloc[-1])
    if df.empty or not any(c in df and df[c].notna().any() for c in NVML_SERIES):
        return "the recording has no NVML samples"
    return None


def devices(df: pd.DataFrame) -> list[int]:
    """Device indices with NVML readings (-1, the "unavailable" row, is not a device)."""
    if "device_index" not in df:
        return []
    idx = pd.to_numeric(df["device_index"], errors="coerce").dropna().astype(int)
    return sorted(int(i) for i in idx.unique() if i >= 0)


def _series(df: pd.DataFrame, col: str) -> np.ndarray:
    return pd.to_numeric(df[col], errors="coerce").to_numpy(np.float64) / GIB


def other_byte_columns(df: pd.DataFrame) -> list[str]:
    known = set(NVML_SERIES) | set(TORCH_SERIES)
    return [c for c in df.columns if c.endswith("_bytes") and c not in known]


def device_memory_figure(df: pd.DataFrame, kv_pool_bytes: int | None = None,
                         device: int | None = None) -> go.Figure:
    """Left: NVML device memory. Right: torch allocated/reserved against the KV pool size.

    `device` keeps the rows of that device_index (plus rows without one).
    """
    if device is not None and "device_index" in df:
        di = pd.to_numeric(df["device_index"], errors="coerce")
        df = df[(di == device) | (di < 0) | di.isna()]
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.08, subplot_titles=(
        "Device memory (NVML)", "Collector process vs KV pool"))
    t = pd.to_numeric(df["t"], errors="coerce").to_numpy(np.float64) if "t" in df else None
    drawn = [c for c in (*NVML_SERIES, *TORCH_SERIES)
             if c in df and pd.to_numeric(df[c], errors="coerce").fillna(0).any()]
    for panel, table in ((1, NVML_SERIES), (2, TORCH_SERIES)):
        for col, (key, label) in table.items():
            if col in drawn and t is not None:
                fig.add_scatter(x=t, y=_series(df, col), name=label, mode="lines", row=1,
                                col=panel, line=dict(color=theme.DEVICE_COLOURS[key], width=2,
                                                     dash="dash" if key == "kv_pool" else None),
                                hovertemplate=f"{label} %{{y:.3f}} GiB<extra></extra>")
    for col in other_byte_columns(df):
        if t is not None:
            fig.add_scatter(x=t, y=_series(df, col), name=col, mode="lines", row=1, col=2)
    if kv_pool_bytes and "kv_pool_bytes" not in drawn:
        fig.add_hline(y=kv_pool_bytes / GIB, line=dict(color=theme.DEVICE_COLOURS["kv_pool"],
                      dash="dash"), annotation_text="KV pool size (lanes' capacity)",
                      row=1, col=2)
    if not any(c in drawn for c in NVML_SERIES):
        fig.add_annotation(text="no NVML readings", showarrow=False, xref="paper",
                           yref="paper", x=0.23, y=0.5, font=dict(size=14, color="#888888"))
    fig.update_yaxes(title_text="GiB", rangemode="tozero")
    fig.update_xaxes(title_text="time (s)")
    fig.update_layout(height=320, margin=dict(l=48, r=8, t=40, b=36),
                      legend=dict(orientation="h", y=-0.3))
    return fig
