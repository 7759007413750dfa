"""The "What if?" curves: blocks in use and preemptions over engine steps, one line per
configuration, the node's own (the baseline) drawn first and thicker."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from kvviz.viz import theme


class Curve(NamedTuple):
    label: str
    step: np.ndarray  # int64: the engine step each point ends
    blocks: np.ndarray  # int64: blocks in use (the most over the point's steps)
    preempted: np.ndarray  # int64: preemptions so far
    usable_blocks: int


def curves_figure(curves: list[Curve], height: int = 320) -> go.Figure:
    """Two panels side by side; curves[0] is the baseline. Blocks in use are drawn as a
    share of each configuration's usable blocks (pools of different sizes on one axis)."""
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.1, subplot_titles=(
        "blocks in use (share of the pool)", "preemptions so far"))
    for i, c in enumerate(curves):
        colour = "#222222" if i == 0 else theme.lane_colour(i - 1)
        width = 2.5 if i == 0 else 1.3
        name = c.label + (" (node's own)" if i == 0 and "node's own" not in c.label else "")
        share = c.blocks / max(1, c.usable_blocks)
        common = dict(mode="lines", name=name, legendgroup=name, line=dict(color=colour,
                                                                           width=width))
        fig.add_trace(go.Scatter(
            x=c.step, y=share, customdata=c.blocks, **common,
            hovertemplate="step %{x}<br>%{customdata} blocks (%{y:.1%})<extra>" + name
                          + "</extra>"), row=1, col=1)
        fig.add_trace(go.Scatter(
            x=c.step, y=c.preempted, showlegend=False, **common,
            hovertemplate="step %{x}<br>%{y} preemptions<extra>" + name + "</extra>"),
            row=1, col=2)
    fig.update_yaxes(tickformat=".0%", range=[0, 1.05], row=1, col=1)
    fig.update_xaxes(title_text="engine step")
    fig.update_layout(height=height, legend=dict(orientation="h", y=-0.3))
    theme.plain(fig, dict(l=50, r=20, t=40, b=110))
    return fig
