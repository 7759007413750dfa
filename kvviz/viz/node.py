"""A scraped serving node over time (RunReader.node_samples) and a fleet table (no streamlit).

Columns read (missing ones are skipped): t, status, message, kv_usage, kv_capacity_tokens,
num_gpu_blocks, block_size, num_running, num_waiting, preemptions_per_s, prefix_hit_rate,
prefix_hit_rate_interval. Only `ok` samples carry numbers; the others are drawn as status
marks with their message.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from kvviz.node.gauges import percent
from kvviz.node.servers import USAGE_DEFINITION
from kvviz.viz import theme
from kvviz.viz.timeseries import Headline

STATUS_COLOURS = {"ok": "#2a9d8f", "unreachable": "#c0392b", "timeout": "#d4a017",
                  "garbled": "#7b3fb3"}
FLEET_COLUMNS = ["job", "instance", "engine", "up", "KV usage", "used / capacity (slots)",
                 "ext. fragmentation", "KV series", "notes"]
FLEET_HELP = {
    "KV usage": USAGE_DEFINITION,
    "used / capacity (slots)": "KV slots in use / KV capacity, summed over the node's pools",
    "ext. fragmentation": "external fragmentation index (1 - largest hole / free) of the "
                          "node's worst lane; only kvviz collectors export it",
    "KV series": "how many KV time series Prometheus holds for the node (one per metric and "
                 "pool, engine, model or lane); 0: it holds none",
    "up": "Prometheus's own `up` series: did its last scrape of the node succeed",
    "notes": "how KV usage was computed, and why a cell says n/a",
}
FLEET_WIDTHS = {"job": 90, "instance": 150, "engine": 80, "up": 60, "KV usage": 90,
                "used / capacity (slots)": 170, "ext. fragmentation": 130, "KV series": 90}
NOT_EXPORTED = "n/a"


def _num(v: object) -> float | None:
    try:
        f = float(v)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) else f


def fraction(y: np.ndarray) -> np.ndarray:
    """NaN (not drawn) where a stored value is no fraction 0..1 (an older recording's gauge
    that the node reported wrong: kvviz/node/gauges.py drops them as they are read now)."""
    return np.where((y >= 0) & (y <= 1), y, np.nan)


def count(y: np.ndarray) -> np.ndarray:
    """NaN (not drawn) where a stored count is negative or not finite."""
    return np.where(np.isfinite(y) & (y >= 0), y, np.nan)


def col(df: pd.DataFrame, name: str) -> np.ndarray:
    """float64 column (NaN where missing or not a number)."""
    if name not in df:
        return np.full(len(df), np.nan)
    return pd.to_numeric(df[name], errors="coerce").to_numpy(np.float64)


def latest_ok(df: pd.DataFrame) -> pd.Series | None:
    ok = df[df["status"] == "ok"] if "status" in df else df.iloc[0:0]
    return None if ok.empty else ok.iloc[-1]


def _fmt(v: float | None, spec: str, suffix: str = "") -> str:
    return NOT_EXPORTED if v is None else format(v, spec) + suffix


def headlines(row: pd.Series | dict | None) -> list[Headline]:
    """The node's latest ok numbers; 'n/a' where there is none, and the help says why (no
    successful scrape yet, or the node's /metrics does not export it)."""
    why = ("no successful scrape yet" if row is None
           else "the node's /metrics does not export it")
    heads = _headlines({} if row is None else dict(row))
    return [h._replace(help=f"{h.help}. n/a: {why}") if h.value == NOT_EXPORTED else h
            for h in heads]


def _usable_blocks(r: dict) -> float | None:
    """Blocks that hold KV: the capacity in tokens over the block size when the node gives
    both (vLLM: num_gpu_blocks less its null block per engine), else num_gpu_blocks."""
    tokens, size = _num(r.get("kv_capacity_tokens")), _num(r.get("block_size"))
    if tokens is not None and size and tokens % size == 0:
        return tokens / size
    return _num(r.get("num_gpu_blocks"))


def _headlines(r: dict) -> list[Headline]:
    usage = _num(r.get("kv_usage"))
    since = _num(r.get("prefix_hit_rate"))
    hit = _num(r.get("prefix_hit_rate_interval"))
    hit = since if hit is None else hit
    return [
        Headline("KV usage", percent(usage, none=NOT_EXPORTED),
                 USAGE_DEFINITION),
        Headline("KV capacity (blocks)", _fmt(_usable_blocks(r), ",.0f"),
                 f"blocks that can hold KV, of {_fmt(_num(r.get('block_size')), '.0f')} slots "
                 f"each: the engine's num_gpu_blocks "
                 f"({_fmt(_num(r.get('num_gpu_blocks')), ',.0f')}) less the one vLLM keeps "
                 "back per engine (block 0, its null block), as the usage counts them"),
        Headline("KV capacity (tokens)", _fmt(_num(r.get("kv_capacity_tokens")), ",.0f"),
                 "slots that can hold KV: vLLM's usable blocks (num_gpu_blocks - 1 per engine) "
                 "x block size; SGLang's max_total_num_tokens"),
        Headline("Running", _fmt(_num(r.get("num_running")), ",.0f"),
                 "requests whose KV is resident"),
        Headline("Waiting", _fmt(_num(r.get("num_waiting")), ",.0f"),
                 "requests queued, preempted ones included"),
        Headline("Preemptions/s", _fmt(_num(r.get("preemptions_per_s")), ",.2f"),
                 "running requests evicted for lack of a free block, over the last interval"),
        Headline("Prefix hit rate", percent(hit, none=NOT_EXPORTED),
                 "prefix-cache hits / lookups over the last scrape interval (since start "
                 "until there are two scrapes)"),
        Headline("Prefix hit rate (since start)",
                 percent(since, none=NOT_EXPORTED),
                 "the engine's cumulative counters since it started: a prefix-cache reset "
                 "does not reset them, so this mixes in what came before"),
    ]


def status_counts(df: pd.DataFrame) -> dict[str, int]:
    if "status" not in df:
        return {}
    return {str(k): int(v) for k, v in df["status"].value_counts().items()}


def node_figure(df: pd.DataFrame) -> go.Figure:
    """Four stacked panels over time: KV usage, queue, preemptions/s, prefix hit rate.
    Samples that are not ok are marked along the KV panel's floor, coloured by status."""
    fig = make_subplots(rows=4, cols=1, shared_xaxes=True, vertical_spacing=0.06,
                        subplot_titles=("KV cache usage (%)", "Queue (requests)",
                                        "Preemptions per second", "Prefix-cache hit rate (%)"))
    t = col(df, "t")
    ok = (df["status"] == "ok").to_numpy() if "status" in df else np.zeros(len(df), bool)

    def line(y: np.ndarray, name: str, row: int, colour: str) -> None:
        if np.isfinite(y[ok]).any():
            fig.add_scatter(x=t[ok], y=y[ok], name=name, mode="lines+markers", row=row, col=1,
                            marker=dict(size=4), line=dict(color=colour, width=2),
                            hovertemplate=f"{name} %{{y:,.2f}} at %{{x:.1f}} s<extra></extra>")

    line(100 * fraction(col(df, "kv_usage")), "KV usage %", 1, theme.lane_colour(0))
    line(count(col(df, "num_running")), "running", 2, theme.lane_colour(2))
    line(count(col(df, "num_waiting")), "waiting", 2, theme.lane_colour(1))
    line(count(col(df, "preemptions_per_s")), "preemptions/s", 3,
         theme.FAILURE_COLOURS["CAPACITY"])
    line(100 * fraction(col(df, "prefix_hit_rate_interval")), "hit rate (interval) %", 4,
         theme.lane_colour(3))
    line(100 * fraction(col(df, "prefix_hit_rate")), "hit rate (since start) %", 4,
         theme.lane_colour(5))
    for status, colour in STATUS_COLOURS.items():
        mask = (df["status"] == status).to_numpy() if "status" in df else ok & False
        if status == "ok" or not mask.any():
            continue
        msgs = df["message"].astype(str).to_numpy()[mask] if "message" in df else None
        fig.add_scatter(x=t[mask], y=np.zeros(int(mask.sum())), name=status, mode="markers",
                        row=1, col=1, marker=dict(color=colour, symbol="x", size=9),
                        customdata=msgs,
                        hovertemplate=f"{status}: %{{customdata}}<extra></extra>")
    fig.update_yaxes(rangemode="tozero")
    fig.update_yaxes(range=[-3, 103], row=1, col=1)
    fig.update_xaxes(title_text="time since the recording started (s)", row=4, col=1)
    fig.update_layout(height=720, margin=dict(l=48, r=8, t=40, b=40),
                      legend=dict(orientation="h", y=-0.08))
    return fig


def _notes(n) -> str:
    """How the usage was computed and why any cell of the row says n/a, in few words."""
    if n.up is False:
        return "node down: Prometheus's last scrape of it failed, so no KV numbers"
    if n.engine == "unknown":
        return "no vLLM, SGLang or kvviz KV series for this node"
    out = [f"usage: {n.usage_basis}" if n.usage_basis else ""]
    if n.up is None:
        out.append("no `up` series: not a target of this Prometheus")
    if n.kv_usage is not None and not (n.kv_used_tokens is not None and n.kv_capacity_tokens):
        out.append("capacity in slots not exported")
    if n.fragmentation is None:
        out.append("fragmentation: kvviz collectors only")
    return "; ".join(x for x in out if x)


def fleet_table(nodes: list) -> pd.DataFrame:
    """kvviz.node.FleetNode list -> one row per node, as text; `notes` says why a cell is
    n/a and how the usage was computed."""
    rows = []
    for n in nodes:
        cap, used = n.kv_capacity_tokens, n.kv_used_tokens
        rows.append({
            "job": n.job, "instance": n.instance, "engine": n.engine,
            "up": {True: "up", False: "down"}.get(n.up, NOT_EXPORTED),
            "KV usage": percent(n.kv_usage, none=NOT_EXPORTED),
            "used / capacity (slots)": (f"{used:,.0f} / {cap:,.0f}" if used is not None and cap
                                        else NOT_EXPORTED),
            "ext. fragmentation": (NOT_EXPORTED if n.fragmentation is None
                                   else f"{n.fragmentation:.2f}"),
            "KV series": n.series, "notes": _notes(n),
        })
    return pd.DataFrame(rows, columns=FLEET_COLUMNS)
