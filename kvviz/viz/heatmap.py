"""Slot-level heatmap of a BlockMap: one cell per block in address order, coloured by state.

Maps larger than `max_cells` are downsampled: each cell then summarises a run of adjacent
blocks (its colour is the dominant state, its hover gives the count in every state).
`blockmap_cells` is the pure data step (tests check it); `blockmap_figure` draws it.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import plotly.graph_objects as go

from kvviz.core.blockmap import BlockMap
from kvviz.viz import cellstate, theme

DEFAULT_MAX_CELLS = 16_384  # 128 x 128: still readable in half a browser window
MAX_COLS = 128
_LABELS = np.array(theme.STATE_LABELS)


class Cells(NamedTuple):
    state: np.ndarray  # int8 [rows, cols]: state (dominant state when run > 1); PAD past end
    counts: np.ndarray  # int32 [rows, cols, NUM_STATES]: blocks in each state per cell
    first: np.ndarray  # int32 [rows, cols]: first block id of each cell (-1 past the end)
    detail: np.ndarray | None  # int32 [rows, cols, 4]: owner, filled, allocated, refcount
    run: int  # blocks per cell (1: one cell per block, detail is set)
    start: int  # first block shown
    stop: int  # one past the last block shown

    @property
    def rows(self) -> int:
        return int(self.state.shape[0])

    @property
    def cols(self) -> int:
        return int(self.state.shape[1])


def grid_cols(num_cells: int) -> int:
    """Columns for `num_cells` cells: the power of two at or above sqrt(n) (a square-ish grid,
    so row starts read as round addresses), at most MAX_COLS."""
    if num_cells <= 8:
        return max(1, num_cells)
    return min(MAX_COLS, 1 << math.ceil(math.log2(math.sqrt(num_cells))))


def _grid(flat: np.ndarray, rows: int, cols: int, fill: int) -> np.ndarray:
    out = np.full(rows * cols, fill, flat.dtype)
    out[: flat.shape[0]] = flat
    return out.reshape(rows, cols)


def blockmap_cells(
    bm: BlockMap, start: int = 0, stop: int | None = None, *,
    max_cells: int = DEFAULT_MAX_CELLS, cols: int | None = None,
) -> Cells:
    """The grid for blocks [start, stop) of `bm` (clamped to the map), at most max_cells cells."""
    n = bm.num_blocks
    stop = n if stop is None else min(int(stop), n)
    start = max(0, int(start))
    if n == 0 or stop <= start:
        raise ValueError(f"block range [{start}, {stop}) is empty for a map of {n} blocks")
    if max_cells < 1:
        raise ValueError(f"max_cells must be >= 1, got {max_cells}")
    span = stop - start
    run = -(-span // max_cells)
    ncell = -(-span // run)
    cols = grid_cols(ncell) if cols is None else max(1, min(int(cols), ncell))
    rows = -(-ncell // cols)
    state = cellstate.classify(bm, start, stop)
    first = np.arange(start, stop, run, dtype=np.int32)
    if run == 1:
        counts = np.zeros((span, cellstate.NUM_STATES), np.int32)
        counts[np.arange(span), state] = 1
        dominant = state
        sl = slice(start, stop)
        detail = np.stack([bm.owner[sl], bm.filled[sl], bm.allocated[sl],
                           bm.refcount[sl].astype(np.int32)], axis=1)
        detail_grid = _grid_rows(detail, rows, cols)
    else:
        counts = cellstate.run_counts(state, run)
        dominant = counts.argmax(axis=1).astype(np.int8)
        detail_grid = None
    return Cells(
        state=_grid(dominant.astype(np.int8), rows, cols, cellstate.PAD),
        counts=_grid_rows(counts, rows, cols),
        first=_grid(first, rows, cols, -1),
        detail=detail_grid,
        run=int(run), start=start, stop=stop,
    )


def cell_unit(run: int, block_size: int) -> str:
    """What one grid cell stands for, e.g. "1 cell = 64 blocks of 16 slots"."""
    if block_size == 1:
        return "1 cell = 1 slot" if run == 1 else f"1 cell = {run:,} slots"
    blocks = "1 block" if run == 1 else f"{run:,} blocks"
    return f"1 cell = {blocks} of {block_size} slots"


def _grid_rows(flat: np.ndarray, rows: int, cols: int) -> np.ndarray:
    """[k, m] -> [rows, cols, m], padding with -1 past the end."""
    out = np.full((rows * cols, flat.shape[1]), -1, np.int32)
    out[: flat.shape[0]] = flat
    return out.reshape(rows, cols, flat.shape[1])


def _colourscale() -> list[list]:
    k = len(theme.STATE_COLOURS)
    scale: list[list] = []
    for i, colour in enumerate(theme.STATE_COLOURS):
        scale += [[i / k, colour], [(i + 1) / k, colour]]
    return scale


_COLOURSCALE = _colourscale()
_COUNTS_HOVER = "<br>".join(
    f"{s.label}: %{{customdata[{i + 1}]}}" for i, s in enumerate(theme.STATES)
)


def blockmap_figure(
    bm: BlockMap, start: int = 0, stop: int | None = None, *,
    max_cells: int = DEFAULT_MAX_CELLS, cols: int | None = None, title: str | None = None,
    height: int | None = None,
) -> go.Figure:
    """Heatmap of blocks [start, stop); hover names the block(s), owner, fill and refcount."""
    c = blockmap_cells(bm, start, stop, max_cells=max_cells, cols=cols)
    unit = "slot" if bm.block_size == 1 else "block"  # a contiguous lane's cells are slots
    if c.run == 1:
        custom = np.concatenate([c.first[..., None], c.detail], axis=2)
        hover = (unit + " %{customdata[0]}: <b>%{text}</b><br>owner seq %{customdata[1]}"
                 "<br>filled %{customdata[2]} / %{customdata[3]} slots"
                 "<br>refcount %{customdata[4]}<extra></extra>")
    else:
        custom = np.concatenate([c.first[..., None], c.counts], axis=2)
        hover = (f"{unit}s %{{customdata[0]}} + {c.run}: mostly <b>%{{text}}</b><br>"
                 + _COUNTS_HOVER + "<extra></extra>")
    gap = 1 if c.cols <= 64 else 0
    heat = dict(
        type="heatmap", z=c.state, text=_LABELS[c.state], customdata=custom.astype(np.int32),
        x=np.arange(c.cols, dtype=np.int64) * (c.run * bm.block_size),
        y=c.first[:, 0].astype(np.int64) * bm.block_size,
        zmin=-0.5, zmax=len(theme.STATE_COLOURS) - 0.5, colorscale=_COLOURSCALE,
        showscale=False, hovertemplate=hover, xgap=gap, ygap=gap,
    )
    shown = f"{unit}s {c.start:,}-{c.stop - 1:,} of {bm.num_blocks:,}"
    per_cell = cell_unit(c.run, bm.block_size)
    layout = dict(
        title=dict(text=f"<b>{theme.text(title or bm.label)}</b><br><sup>{shown}; "
                        f"{per_cell}</sup>",
                   font=dict(size=14, color=theme.TITLE_COLOUR), x=0, xanchor="left",
                   xref="container", pad=dict(l=4)),
        font=theme.FONT, hoverlabel=theme.HOVERLABEL,
        # Room for 6-digit tick labels and the axis titles (what Streamlit's theme, with
        # automargin, pushed the margins to): fixed, so plotly never draws a chart twice.
        margin=dict(l=94, r=18, t=58, b=66, pad=8),
        height=height or int(min(560, 90 + c.rows * min(24.0, max(3.0, 600 / c.cols)))),
        plot_bgcolor=theme.PAD_COLOUR,
        uirevision=bm.label,
        xaxis=dict(showgrid=False, zeroline=False, ticks="", tickformat=",d",
                   title=dict(text="+ slots", font=dict(size=11), standoff=20)),
        yaxis=dict(showgrid=False, zeroline=False, autorange="reversed", tickformat=",d",
                   ticks="outside", ticklen=5, tickcolor=theme.GRID_COLOUR,
                   title=dict(text="slot address of row", font=dict(size=11), standoff=24)),
    )
    fig = go.Figure(data=[heat], layout=layout)
    # No template: the figure carries its whole style (Streamlit's light theme, spelled out
    # above), so the Live page draws it with theme=None: no theme merge (a JSON round trip of
    # the figure) in the browser each time Streamlit re-mounts the chart.
    fig.layout.template = None
    return fig
