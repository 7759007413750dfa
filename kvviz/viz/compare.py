"""Compare view: the upload overview, the summary table and the figures of allocator lanes.

Shares follow the PagedAttention paper's memory-waste breakdown (Kwon et al., SOSP'23):
used (KV written), reserved (held, will be written), internal (held, never written), free.
Each is time-averaged twice: over all of a lane's steps (`all_<key>`) and over its
memory-pressure steps (`<key>`, NaN when the lane never was under memory pressure).
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from kvviz.core.config import PLACEMENTS, RESERVE_POLICIES
from kvviz.engine.compare import Upload
from kvviz.runs.advisor import Advice, KernelPoint, MemoryPoint
from kvviz.traces.overview import overview
from kvviz.viz import cellstate, theme

PAGED_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
SHARES = (("used_share", "Used"), ("reserved_share", "Slack: reserved (will be written)"),
          ("internal_share", "Slack: internal (never written)"), ("free_share", "Free"))
SHARE_COLOURS = (theme.STATES[cellstate.USED].colour, theme.STATES[cellstate.RESERVED].colour,
                 "#d1495b", theme.STATES[cellstate.FREE].colour)
FAILURES = ("capacity", "fragmentation", "policy")
NEVER = "never under memory pressure"
DEFAULT_LANES = ("contiguous:first-fit:max", "contiguous:best-fit:pow2",
                 "contiguous:buddy:exact", "paged:16")


def overview_frame(up: Upload) -> pd.DataFrame:
    """What was detected in an upload, one row per fact, shown before anything runs."""
    return pd.DataFrame(overview(up.workload, up.info, up.max_seq_len),
                        columns=["detected", "value"])


def lane_options() -> list[str]:
    """Every lane label the Compare page offers, contiguous first."""
    out = [f"contiguous:{p}:{r}" for p in PLACEMENTS for r in RESERVE_POLICIES]
    out += [f"paged:{bs}" for bs in PAGED_SIZES]
    return out + [f"paged:{bs}:prefix" for bs in PAGED_SIZES]


def summary_frame(summaries: Sequence[dict], step_ms: float) -> pd.DataFrame:
    """One row per lane: shares over memory-pressure steps (NaN if none) and over all steps
    (`all_` prefix), pressure steps and their fraction, failures by class, preemptions,
    throughput."""
    rows = []
    for s in summaries:
        sim_s = s["steps"] * step_ms / 1000.0
        pressure = s["pressure_step_shares"]
        row = {"lane": s["lane"]}
        row.update({k: np.nan if pressure is None else float(pressure[k.removesuffix("_share")])
                    for k, _ in SHARES})
        row.update({f"all_{k}": float(s[k]) for k, _ in SHARES})
        row["all_tail_waste_share"] = float(s["tail_waste_share"])
        row["pressure_steps"] = int(s["pressure_steps"])
        row["pressure_fraction"] = s["pressure_steps"] / s["steps"] if s["steps"] else 0.0
        row.update({f: int(s["admit_failures"].get(f, 0)) for f in FAILURES})
        row.update(preemptions=int(s["preemptions"]), rejected=int(s["rejected"]),
                   finished=int(s["finished"]),
                   # every admission ends in a finish or a preemption (then re-admission)
                   admissions=int(s["finished"]) + int(s["preemptions"]),
                   mean_batch=s["tokens_generated"] / s["steps"] if s["steps"] else 0.0,
                   steps=int(s["steps"]), tokens=int(s["tokens_generated"]),
                   tokens_per_sim_s=s["tokens_generated"] / sim_s if sim_s else 0.0,
                   wall_seconds=float(s["wall_seconds"]),
                   prefix_hit_rate=float(s.get("prefix_hit_rate", 0.0)))
        rows.append(row)
    return pd.DataFrame(rows)


def display_table(df: pd.DataFrame) -> pd.DataFrame:
    """The summary with readable headers and shares in percent."""
    out = pd.DataFrame({"lane": df["lane"]})
    out["memory-pressure steps"] = df["pressure_steps"]
    out["memory-pressure steps %"] = (100 * df["pressure_fraction"]).round(1)
    for k, label in SHARES:
        name = label.split(" (")[0].lower()
        out[f"{name} % (all steps)"] = (100 * df[f"all_{k}"]).round(1)
        out[f"{name} % (memory pressure)"] = (100 * df[k]).round(1)  # empty if never
    out["tail waste % (all steps)"] = (100 * df["all_tail_waste_share"]).round(1)
    for f in FAILURES:
        out[f"{f} failures"] = df[f]
    out["preemptions"] = df["preemptions"]
    if "prefix_hit_rate" in df:
        out["prefix hit %"] = (100 * df["prefix_hit_rate"]).round(1)
    out["steps to finish"] = df["steps"]
    out["tokens / sim s"] = df["tokens_per_sim_s"].round(0)
    out["wall s"] = df["wall_seconds"].round(2)
    return out


def _layout(fig: go.Figure, title: str, height: int = 360) -> go.Figure:
    fig.update_layout(title=dict(text=title, y=0.98, yanchor="top"), height=height,
                      margin=dict(l=10, r=10, t=80, b=10), plot_bgcolor="white",
                      legend=dict(orientation="h", x=0, y=1.0, yanchor="bottom",
                                  traceorder="normal"))
    return fig


def _lane_height(n: int) -> int:
    return 150 + 38 * n


def share_rows(df: pd.DataFrame) -> tuple[np.ndarray, pd.DataFrame]:
    """Two bars per lane: its all-steps average, then its memory-pressure average (no bar,
    and a label saying so, when the lane never was under memory pressure)."""
    labels, cols = [], {k: [] for k, _ in SHARES}
    for _, r in df.iterrows():
        labels.append(f"{r['lane']} · all {int(r['steps'])} steps")
        n = int(r["pressure_steps"])
        labels.append(f"{r['lane']} · {NEVER}" if n == 0 else
                      f"{r['lane']} · memory pressure: {n} steps ({r['pressure_fraction']:.1%})")
        for k, _ in SHARES:
            cols[k] += [float(r[f"all_{k}"]), float(r[k])]
    return np.array(labels, dtype=object), pd.DataFrame(cols)


def shares_figure(df: pd.DataFrame) -> go.Figure:
    """Stacked horizontal bars: used / reserved / internal / free share of capacity, per lane
    averaged over all steps and over memory-pressure steps."""
    labels, vals = share_rows(df)
    fig = go.Figure()
    for (key, label), colour in zip(SHARES, SHARE_COLOURS):
        fig.add_bar(y=labels, x=vals[key].to_numpy(np.float64), name=label, orientation="h",
                    marker_color=colour, marker_line=dict(color="#999999", width=0.5),
                    hovertemplate=f"%{{y}}<br>{label}: %{{x:.1%}}<extra></extra>")
    fig.update_layout(barmode="stack")
    fig.update_xaxes(range=[0, 1.005], tickformat=".0%", title="share of KV capacity")
    fig.update_yaxes(autorange="reversed")
    return _layout(fig, "Where the KV memory goes: mean over all steps, and over "
                   "memory-pressure steps", _lane_height(len(labels)))


def failures_figure(df: pd.DataFrame) -> go.Figure:
    """Stacked horizontal bars of admission failures by class, plus preemptions, per lane."""
    lanes = df["lane"].to_numpy()
    fig = go.Figure()
    for f in FAILURES:
        fig.add_bar(y=lanes, x=df[f].to_numpy(np.int64), name=f.upper(), orientation="h",
                    marker_color=theme.FAILURE_COLOURS[f.upper()],
                    hovertemplate=f"%{{y}}<br>{f.upper()}: %{{x}}<br>"
                    f"{theme.FAILURE_MEANING[f.upper()]}<extra></extra>")
    fig.add_scatter(y=lanes, x=df["preemptions"].to_numpy(np.int64), name="preemptions",
                    mode="markers", marker=dict(symbol="diamond", size=11, color="#222222"),
                    hovertemplate="%{y}<br>%{x} preemptions<extra></extra>")
    fig.update_layout(barmode="stack")
    # counts: the axis starts at 0 (plotly centres an all-zero axis on 0, showing -1 .. 1)
    fig.update_xaxes(title="count", rangemode="nonnegative")
    fig.update_yaxes(autorange="reversed")
    return _layout(fig, "Admission failures by class, and preemptions", _lane_height(len(lanes)))


def throughput_figure(df: pd.DataFrame) -> go.Figure:
    """Tokens generated per simulated second; the bar text gives steps to finish."""
    lanes = df["lane"].to_numpy()
    steps = df["steps"].to_numpy(np.int64)
    fig = go.Figure(go.Bar(
        y=lanes, x=df["tokens_per_sim_s"].to_numpy(np.float64), orientation="h",
        marker_color=[theme.lane_colour(i) for i in range(len(lanes))],
        text=np.char.add(steps.astype(str), " steps to finish"), textposition="auto",
        hovertemplate="%{y}<br>%{x:.0f} tokens / simulated s<br>%{text}<extra></extra>",
    ))
    fig.update_xaxes(title="tokens generated / simulated s")
    fig.update_yaxes(autorange="reversed")
    return _layout(fig, "Throughput on the same workload", _lane_height(len(lanes)))


def kernel_axis_top(kernel: Sequence[KernelPoint]) -> float | None:
    """The kernel panel's y-axis top when some p10-p90 bar reaches far above the medians
    (3x the largest median or contiguous time): that top, else None (the axis fits all)."""
    lines = max(max(k.paged_ms for k in kernel), max(k.contiguous_ms for k in kernel))
    top = 3.0 * lines
    return top if lines > 0 and max(k.high for k in kernel) > top else None


def advisor_figure(memory: Sequence[MemoryPoint], kernel: Sequence[KernelPoint] | None,
                   advice: Advice | None) -> go.Figure:
    """Block size on x: tail waste (top), failures and preemptions (middle), kernel time."""
    rows = 3 if kernel else 2
    titles = ["Tail waste (share of capacity)", "Admission failures and preemptions",
              "Decode-attention time on this machine"][:rows]
    fig = make_subplots(rows=rows, cols=1, shared_xaxes=True, subplot_titles=titles,
                        vertical_spacing=0.08)
    sizes = np.array([m.block_size for m in memory], np.int64)
    xs = sizes.astype(str)
    fig.add_bar(x=xs, y=np.array([m.tail_waste_share for m in memory]), name="tail waste",
                marker_color=theme.STATES[cellstate.TAIL].colour, row=1, col=1,
                hovertemplate="block %{x}: %{y:.1%}<extra>tail waste</extra>")
    fig.add_bar(x=xs, y=np.array([m.admit_failures for m in memory], np.int64),
                name="admission failures", marker_color=theme.FAILURE_COLOURS["CAPACITY"],
                row=2, col=1)
    fig.add_bar(x=xs, y=np.array([m.preemptions for m in memory], np.int64),
                name="preemptions", marker_color="#555555", row=2, col=1)
    if kernel:
        kx = np.array([k.block_size for k in kernel], np.int64).astype(str)
        med = np.array([k.paged_ms for k in kernel])
        fig.add_scatter(x=kx, y=med, name="paged kernel (median, bar: p10-p90)",
                        mode="lines+markers", line_color=theme.lane_colour(0), row=3, col=1,
                        error_y=dict(type="data", symmetric=False,
                                     array=np.array([k.high for k in kernel]) - med,
                                     arrayminus=med - np.array([k.low for k in kernel])))
        fig.add_scatter(x=kx, y=np.array([k.contiguous_ms for k in kernel]),
                        name="contiguous kernel (no block table)", mode="lines",
                        line=dict(color="#888888", dash="dash"), row=3, col=1)
        fig.update_yaxes(title="ms", rangemode="tozero", row=3, col=1)
        top = kernel_axis_top(kernel)
        if top is not None:  # a noisy run's p90 would flatten every median to the axis
            fig.update_yaxes(range=[0, top], row=3, col=1)
            fig.add_annotation(text=f"bars cut at {top:,.2f} ms (p90 up to "
                                    f"{max(k.high for k in kernel):,.1f} ms: a noisy run)",
                               xref="x3 domain", yref="y3 domain", x=1, y=1, showarrow=False,
                               xanchor="right", yanchor="bottom", font=dict(size=11))
    fig.update_yaxes(tickformat=".0%", row=1, col=1)
    fig.update_xaxes(type="category", categoryorder="array", categoryarray=xs)
    fig.update_xaxes(title="block size (slots)", row=rows, col=1)
    if advice is not None and advice.block_size is not None and advice.block_size in sizes:
        i = int(np.flatnonzero(sizes == advice.block_size)[0])
        for r in range(1, rows + 1):
            fig.add_vrect(x0=i - 0.5, x1=i + 0.5, fillcolor="#2a9d8f", opacity=0.15,
                          line_width=0, row=r, col=1)
    fig.update_layout(barmode="group")
    _layout(fig, "Block-size sweep" + (f": recommended {advice.block_size}"
                                       if advice and advice.block_size else ""), 260 * rows)
    fig.update_layout(legend=dict(y=-0.3 / rows, yanchor="top"), margin=dict(t=60, b=130))
    return fig
