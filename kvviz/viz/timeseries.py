"""Headline numbers, time series and the admission-failure feed, from a recording's samples
(RunReader.samples) and events (RunReader.events). Engine counters in samples are cumulative.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from kvviz.viz import theme
from kvviz.viz.glossary import define

FAILURE_CLASSES = ("CAPACITY", "FRAGMENTATION", "POLICY")
FAILURE_COLUMNS = {c: f"admit_failures_{c.lower()}" for c in FAILURE_CLASSES}
FEED_COLUMNS = ["t", "lane", "seq_id", "class", "need_tokens", "free_tokens",
                "largest_hole_tokens", "free_covers_need"]


class Headline(NamedTuple):
    label: str
    value: str
    help: str


def _num(row: pd.Series | dict, key: str, default: float = 0.0) -> float:
    v = row.get(key, default)
    return default if v is None or (isinstance(v, float) and np.isnan(v)) else float(v)


def headline(row: pd.Series | dict) -> list[Headline]:
    """The numbers shown above a lane's heatmap, from its latest sample."""
    cap = max(1.0, _num(row, "capacity_tokens", 1.0))
    fails = {c: int(_num(row, col)) for c, col in FAILURE_COLUMNS.items()}
    return [
        Headline("Used", f"{_num(row, 'used_tokens') / cap:.0%}", _share("used")),
        Headline("Slack", f"{_num(row, 'slack_tokens') / cap:.0%}", _share("slack")),
        Headline("Free", f"{_num(row, 'free_tokens') / cap:.0%}", _share("free")),
        Headline("Largest hole", f"{int(_num(row, 'largest_hole_tokens')):,}",
                 f"slots: {define('largest hole')}"),
        _frag_headline(row),
        Headline("Failures C/F/P",
                 f"{fails['CAPACITY']}/{fails['FRAGMENTATION']}/{fails['POLICY']}",
                 "admission failures by class: CAPACITY / FRAGMENTATION / POLICY"),
        Headline("Preemptions", f"{int(_num(row, 'preemptions')):,}",
                 "running sequences evicted to make room"),
        Headline("Tokens/s", f"{_num(row, 'tokens_per_s'):,.0f}", "decode throughput"),
        *_prefix_headline(row),
    ]


def _frag_headline(row: pd.Series | dict) -> Headline:
    """The index, with "(0 for paged)" in the label of a paged lane: 0 there by design."""
    paged = str(row.get("lane", "")).startswith("paged")
    return Headline("External fragmentation index" + (" (0 for paged)" if paged else ""),
                    f"{_num(row, 'external_frag_index'):.2f}",
                    define("external fragmentation index"))


def _share(term: str) -> str:
    return f"share of capacity: {define(term)}"


def _prefix_headline(row: pd.Series | dict) -> list[Headline]:
    """The prefix hit rate, for a lane whose samples count prefix-cache queries."""
    queries = _num(row, "prefix_query_tokens")
    hits = _num(row, "prefix_hit_tokens")
    if not queries or "prefix" not in str(row.get("lane", "")):
        return []
    cap = max(1.0, _num(row, "capacity_tokens", 1.0))
    return [Headline("Prefix hit rate", f"{hits / queries:.0%}",
                     f"since the start: {define('prefix hit rate')}"),
            Headline("Shared savings", f"{_num(row, 'shared_savings_tokens') / cap:.0%}",
                     _share("shared savings"))]


def thin(samples: pd.DataFrame, max_points: int = 300) -> pd.DataFrame:
    """At most `max_points` rows per lane, evenly spread in time: the last sample of each of
    `max_points` equal time buckets (counters are cumulative, so the last one is right).

    A browser draws a 300-point line as well as a 1,200-point one, for a quarter of the work:
    the Live page's 5-minute window holds 1,200 samples per lane at 4 Hz.
    """
    if max_points < 1:
        raise ValueError(f"max_points must be >= 1, got {max_points}")
    if samples.empty or "t" not in samples:
        return samples
    keep = np.zeros(len(samples), bool)
    lanes = samples["lane"].to_numpy() if "lane" in samples else np.zeros(len(samples))
    t = pd.to_numeric(samples["t"], errors="coerce").to_numpy(np.float64)
    for lane in pd.unique(lanes):
        idx = np.flatnonzero(lanes == lane)
        if idx.size <= max_points:
            keep[idx] = True
            continue
        tl = t[idx]
        lo, hi = np.nanmin(tl), np.nanmax(tl)
        width = (hi - lo) / max_points or 1.0
        bucket = np.minimum(((tl - lo) / width).astype(np.int64), max_points - 1)
        last = np.flatnonzero(np.append(bucket[1:] != bucket[:-1], True))  # t is ascending
        keep[idx[last]] = True
    return samples[keep]


def numeric(df: pd.DataFrame, name: str) -> np.ndarray:
    """Column `name` as float64, 0 where it is missing or not a number."""
    if name not in df:
        return np.zeros(len(df), np.float64)
    return pd.to_numeric(df[name], errors="coerce").fillna(0).to_numpy(np.float64)


def lane_rows(samples: pd.DataFrame, lane: str) -> pd.DataFrame:
    """The samples of one lane (all of them when the frame has no lane column)."""
    return samples[samples["lane"] == lane] if "lane" in samples else samples


def _mark(fig: go.Figure, mark_t: float | None) -> None:
    if mark_t is not None:
        fig.add_vline(x=mark_t, line=dict(color="#d1495b", width=1.5))


def over_time_figure(samples: pd.DataFrame, lanes: list[str],
                     mark_t: float | None = None) -> go.Figure:
    """Four panels, one line per lane: ext. frag. index, largest hole, failures, tokens/s.

    `mark_t` draws a vertical line at that time (the Replay page's cursor).
    """
    fig = make_subplots(rows=1, cols=4, horizontal_spacing=0.06, subplot_titles=(
        "External fragmentation index", "Largest hole (slots)",
        "Admission failures (cumulative)<br><sup>solid CAPACITY · dashed FRAGMENTATION · "
        "dotted POLICY</sup>", "Tokens/s"))
    for i, lane in enumerate(lanes):
        df = lane_rows(samples, lane)
        t = numeric(df, "t")
        colour = theme.lane_colour(i)
        lane = theme.text(lane)  # as text: lane names come from a recording
        common = dict(mode="lines", legendgroup=lane, line=dict(color=colour, width=1.5))
        fig.add_scatter(x=t, y=numeric(df, "external_frag_index"), name=lane, row=1, col=1,
                        **common)
        fig.add_scatter(x=t, y=numeric(df, "largest_hole_tokens"), name=lane, row=1, col=2,
                        showlegend=False, **common)
        for cls, dash in zip(FAILURE_CLASSES, ("solid", "dash", "dot")):
            fig.add_scatter(x=t, y=numeric(df, FAILURE_COLUMNS[cls]), row=1, col=3,
                            name=f"{lane} {cls}", showlegend=False, mode="lines",
                            legendgroup=lane, line=dict(color=colour, width=1.5, dash=dash),
                            hovertemplate=f"{cls} %{{y:,.0f}}<extra>{lane}</extra>")
        fig.add_scatter(x=t, y=numeric(df, "tokens_per_s"), name=lane, row=1, col=4,
                        showlegend=False, **common)
    fig.update_annotations(font_size=12)
    fig.update_layout(height=260, legend=dict(orientation="h", x=0, y=-0.12, yanchor="top"))
    theme.plain(fig, dict(l=48, r=12, t=60, b=52))
    fig.update_yaxes(range=[0, 1.02], row=1, col=1)
    fig.update_yaxes(rangemode="tozero")
    _mark(fig, mark_t)
    return fig


def failure_table(events: pd.DataFrame, newest_first: bool = True) -> pd.DataFrame:
    """Admission failures with the free total against the largest hole at that moment."""
    if events.empty or "kind" not in events:
        return pd.DataFrame(columns=FEED_COLUMNS)
    df = events[events["kind"] == "admit_failed"].copy()
    df["class"] = df["reason"].fillna("?")
    df["free_covers_need"] = df["free_tokens"] >= df["need_tokens"]
    df = df.sort_values("t", ascending=not newest_first, kind="stable")
    return df[FEED_COLUMNS].reset_index(drop=True)
