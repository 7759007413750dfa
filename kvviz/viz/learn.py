"""Learn figures: a line of slots with its owners labelled, a block table, the block-size trade.

Slots are coloured by state in Live's colours (kvviz.viz.theme.STATES: used, reserved, tail
waste, shared prefix, cached, free), so a colour means the same on every page; owners are
told apart by their letter above the line and a dark boundary between neighbours.
`slot_codes` is the pure data step (tests check it); the figures draw it.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from kvviz.core.blockmap import FREE, BlockMap
from kvviz.core.metrics import hole_sizes, hole_starts
from kvviz.story import TradeoffPoint
from kvviz.viz import cellstate, theme

LINE_Y = 0.0  # the slots row spans y in [-0.5, 0.5]
LABEL_Y = 0.85  # owner letters, above the row
TABLE_Y = 2.4  # the block-table row
STATE_WORDS = {cellstate.FREE: "free", cellstate.CACHED: "cached (free, prefix kept)",
               cellstate.USED: "used (KV written)",
               cellstate.TAIL: "tail waste (held in the last block, not written)",
               cellstate.RESERVED: "slack (held, not written yet)",
               cellstate.SHARED: "shared prefix (written, several holders)"}


def slot_codes(bm: BlockMap, owners: Sequence[int]) -> np.ndarray:
    """int8 [capacity_tokens]: each slot's state (kvviz.viz.cellstate codes, Live's colours).
    Owned slots: written -> USED (SHARED when the block has several holders); unwritten ->
    RESERVED in a contiguous range or a paged block nothing is written in yet, TAIL in a
    paged block partly written. Free slots: CACHED when the block keeps prefix content,
    else FREE. Every live owner must be in `owners` (ValueError otherwise)."""
    bs = bm.block_size
    pos = np.tile(np.arange(bs, dtype=np.int32), bm.num_blocks)  # position inside its block
    owner = np.repeat(bm.owner, bs)
    filled = np.repeat(bm.filled, bs)
    written = pos < filled
    if np.setdiff1d(np.unique(owner[owner != FREE]), np.asarray(owners, np.int64)).size:
        raise ValueError("slot_codes: a live sequence is missing from `owners`")
    owned = owner != FREE
    codes = np.where(np.repeat(bm.cached, bs), cellstate.CACHED, cellstate.FREE)
    unwritten = cellstate.RESERVED if bm.contiguous else np.where(
        filled > 0, cellstate.TAIL, cellstate.RESERVED)
    codes = np.where(owned & ~written, unwritten, codes)
    shared = np.repeat(bm.refcount, bs) > 1
    codes = np.where(owned & written, np.where(shared, cellstate.SHARED, cellstate.USED), codes)
    return codes.astype(np.int8)


def _colourscale() -> list[list]:
    colours = [s.colour for s in theme.STATES]  # index = state code
    n = len(colours)
    scale = []
    for i, c in enumerate(colours):  # flat steps: code i covers [i/n, (i+1)/n]
        scale += [[i / n, c], [(i + 1) / n, c]]
    return scale


def _runs(owner: np.ndarray) -> list[tuple[int, int, int]]:
    """(owner, first block, last block) of each run of equal, non-free owners."""
    out: list[tuple[int, int, int]] = []
    for b, o in enumerate(owner.tolist()):
        if o == FREE:
            continue
        if out and out[-1][0] == o and out[-1][2] == b - 1:
            out[-1] = (o, out[-1][1], b)
        else:
            out.append((o, b, b))
    return out


def slot_line_figure(bm: BlockMap, names: Mapping[int, str], *, title: str = "",
                     table: np.ndarray | None = None, table_owner: int | None = None,
                     tail_owner: int | None = None) -> go.Figure:
    """One row of slots coloured by owner (pale = slack, not written; grey = free).

    Paged maps get block borders and block ids; contiguous maps get their holes labelled.
    `table` draws `table_owner`'s block table above the line with an arrow per entry.
    """
    owners = sorted(names)
    codes = slot_codes(bm, owners)
    cap, bs = bm.capacity_tokens, bm.block_size
    blk = np.arange(cap) // bs
    slot_owner = np.repeat(bm.owner, bs)
    who = np.array([names.get(int(o), "") for o in slot_owner.tolist()], dtype=object)
    words = np.array([STATE_WORDS[c] for c in range(len(STATE_WORDS))], dtype=object)
    hover = (np.char.add("slot ", np.arange(cap).astype(str)).astype(object)
             + np.char.add(", block ", blk.astype(str)).astype(object) + ": "
             + np.where(who == "", "", who + ", ") + words[codes])
    fig = go.Figure(go.Heatmap(
        z=codes[None, :], x=np.arange(cap), y=np.array([LINE_Y]), zmin=-0.5,
        zmax=len(theme.STATES) - 0.5, colorscale=_colourscale(), showscale=False,
        xgap=1, customdata=hover.astype(str)[None, :],
        hovertemplate="%{customdata}<extra></extra>"))
    runs = _runs(bm.owner) if bm.contiguous else [
        (int(o), b, b) for b, o in enumerate(bm.owner.tolist()) if o != FREE]
    for seq, first, last in runs:  # one label per range (contiguous) or per block (paged)
        x = ((first + last + 1) * bs - 1) / 2
        shared = not bm.contiguous and int(bm.refcount[first]) > 1
        # a shared block names its first holder and how many more (the hover lists the state);
        # short, so that it fits one block of the narrowest line drawn here
        text = (f"<b>{names[seq]}</b>+{int(bm.refcount[first]) - 1}" if shared
                else f"<b>{names[seq]}</b>")
        fig.add_annotation(x=x, y=LABEL_Y, text=text, showarrow=False,
                           font=dict(color=theme.TITLE_COLOUR, size=15))
    for b in np.flatnonzero(bm.cached & (bm.owner == FREE)).tolist():
        fig.add_annotation(x=b * bs + (bs - 1) / 2, y=LABEL_Y, text="cached", showarrow=False,
                           font=dict(color="#2d6a4f", size=11))
    if bm.contiguous:
        for (_, _, last), (_, first, _) in zip(runs, runs[1:]):
            if first == last + 1:  # two ranges touch: a boundary between their owners
                fig.add_shape(type="line", x0=first * bs - 0.5, x1=first * bs - 0.5,
                              y0=-0.6, y1=0.6, line=dict(color="#222222", width=3))
        for start, size in zip(hole_starts(bm).tolist(), hole_sizes(bm).tolist()):
            fig.add_annotation(x=start * bs + (size - 1) / 2, y=-0.9, showarrow=False,
                               text=f"hole: {size} slots", font=dict(size=12, color="#555555"))
        ticks = np.arange(0, cap + 1, max(1, cap // 8))
        fig.update_xaxes(tickvals=ticks - 0.5, ticktext=ticks.astype(str), title="slot")
    else:
        for b in range(1, bm.num_blocks):
            fig.add_shape(type="line", x0=b * bs - 0.5, x1=b * bs - 0.5, y0=-0.6, y1=0.6,
                          line=dict(color="#222222", width=3))
        centres = np.arange(bm.num_blocks) * bs + (bs - 1) / 2
        fig.update_xaxes(tickvals=centres, ticktext=np.char.add(
            "block ", np.arange(bm.num_blocks).astype(str)), title=f"{bs} slots per block")
    if tail_owner is not None:
        _mark_tail(fig, bm, tail_owner, names)
    top = 1.15
    if table is not None and table_owner is not None:
        top = _draw_table(fig, np.asarray(table), bs, cap, names[table_owner])
    fig.update_yaxes(visible=False, range=[-1.3, top])
    fig.update_xaxes(range=[-0.6, cap - 0.4], showgrid=False, zeroline=False)
    fig.update_layout(title=title, height=190 if table is None else 320,
                      margin=dict(l=10, r=10, t=40 if title else 10, b=40),
                      plot_bgcolor="white")
    return fig


def _mark_tail(fig: go.Figure, bm: BlockMap, seq: int, names: Mapping[int, str]) -> None:
    held = np.flatnonzero((bm.owner == seq) & (bm.filled < bm.allocated) & (bm.filled > 0))
    bs = bm.block_size
    for b in held.tolist():
        x0 = b * bs + int(bm.filled[b]) - 0.5
        x1 = (b + 1) * bs - 0.5
        fig.add_shape(type="rect", x0=x0, x1=x1, y0=-0.55, y1=0.55,
                      line=dict(color="#f08c2e", width=3, dash="dot"))
        right = x1 > bm.capacity_tokens / 2
        fig.add_annotation(x=(x0 + x1) / 2, y=-0.55, ay=-1.05, ayref="y", ax=(x0 + x1) / 2,
                           axref="x", text=f"tail waste of {names[seq]}: {int(x1 - x0)} slots",
                           xanchor="right" if right else "left", arrowcolor="#f08c2e",
                           font=dict(color="#b35c00"), arrowhead=2)


def _draw_table(fig: go.Figure, table: np.ndarray, bs: int, cap: int, name: str) -> float:
    """Logical block i of the sequence -> physical block table[i], with an arrow each."""
    n = table.size
    width = cap / max(n, 1)
    for i, phys in enumerate(table.tolist()):
        x0, x1 = i * width + 0.15 * width - 0.5, (i + 0.85) * width - 0.5
        fig.add_shape(type="rect", x0=x0, x1=x1, y0=TABLE_Y - 0.4, y1=TABLE_Y + 0.4,
                      line=dict(color="#222222"), fillcolor="#ffffff")
        fig.add_annotation(x=(x0 + x1) / 2, y=TABLE_Y, showarrow=False,
                           text=f"{name}[{i}] → block {phys}", font=dict(color="#111111"))
        fig.add_annotation(x=phys * bs + (bs - 1) / 2, y=LINE_Y + 0.55, ax=(x0 + x1) / 2,
                           ay=TABLE_Y - 0.4, axref="x", ayref="y", text="", showarrow=True,
                           arrowhead=2, arrowwidth=1.5, arrowcolor="#444444")
    fig.add_annotation(x=-0.5, y=TABLE_Y + 0.65, xanchor="left", showarrow=False,
                       text=f"<b>block table of {name}</b> (logical → physical)")
    return TABLE_Y + 0.9


def tradeoff_figure(points: Sequence[TradeoffPoint], selected: int | None = None) -> go.Figure:
    """Tail waste share (bars) and block-table entries (line, log scale) per block size."""
    sizes = np.array([p.block_size for p in points], np.int64)
    xs = sizes.astype(str)
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    colours = np.where(sizes == selected, theme.STATES[cellstate.TAIL].colour, "#f5c69a")
    fig.add_bar(x=xs, y=np.array([p.tail_share for p in points]), name="tail waste",
                marker_color=colours, hovertemplate="block %{x}: %{y:.1%} of capacity"
                "<extra>tail waste</extra>", secondary_y=False)
    fig.add_scatter(x=xs, y=np.array([p.table_entries for p in points], np.int64),
                    name="block-table entries", mode="lines+markers",
                    line_color=theme.lane_colour(0), secondary_y=True,
                    hovertemplate="block %{x}: %{y:,} entries<extra>block tables</extra>")
    fig.update_xaxes(type="category", title="block size (slots)")
    fig.update_yaxes(title="tail waste (share of capacity)", tickformat=".0%",
                     secondary_y=False)
    fig.update_yaxes(title="block-table entries (log)", type="log", secondary_y=True,
                     showgrid=False, dtick=1, tickformat="~s")
    fig.update_layout(height=360, margin=dict(l=10, r=10, t=30, b=10), plot_bgcolor="white",
                      legend=dict(orientation="h", y=1.12))
    return fig
