"""A torch CUDA memory snapshot as numbers, a segment table and a heatmap (no streamlit).

Heatmap: one row per caching-allocator segment (address order, not to scale between rows),
one column per cell of `cell_bytes`; each cell takes the state holding most of its bytes:
active (allocated, incl. pending free), inactive hole, rounding waste, or unmapped (past the
segment's end). Hover gives the exact bytes of each kind in the cell.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from kvviz.torchsnap import Snapshot, SnapshotCells, SnapshotSummary, snapshot_cells
from kvviz.torchsnap.summary import CELL_ACTIVE, CELL_HOLE, CELL_UNMAPPED, CELL_WASTE
from kvviz.viz import cellstate, theme
from kvviz.viz.timeseries import Headline

MIN_CELL = 512
MAX_COLS = 512  # cells across the widest segment
MAX_CELLS = 1 << 16  # rows x columns drawn
MAX_ROWS = 256  # segments drawn (the first ones in address order)
# state code -> (colour, label); codes are summary.CELL_* (0..3)
CELL_STYLE = {
    CELL_UNMAPPED: (theme.PAD_COLOUR, "unmapped (past the segment's end)"),
    CELL_ACTIVE: (theme.STATES[cellstate.USED].colour, "active (allocated)"),
    CELL_WASTE: (theme.STATES[cellstate.TAIL].colour, "rounding waste"),
    CELL_HOLE: ("#9e9e9e", "inactive hole (free inside the segment)"),
}


def human_bytes(n: float) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:,.1f} {unit}"
    return f"{n:,.0f} B"


def headlines(s: SnapshotSummary) -> list[Headline]:
    """The snapshot's summary numbers, in the order the page shows them."""
    return [
        Headline("Reserved", human_bytes(s.reserved), f"{len(s.segments)} segments cudaMalloc'ed"),
        Headline("Allocated", human_bytes(s.allocated), "active_allocated blocks, incl. rounding"),
        Headline("Inactive holes", human_bytes(s.free),
                 f"{s.holes} free blocks inside segments: reusable, but one request needs "
                 "one hole large enough"),
        Headline("Rounding waste", human_bytes(s.rounding_waste),
                 "size - requested_size of allocated blocks" + (
                     "" if s.requested_known else " (some blocks lack requested_size)")),
        Headline("Largest hole", human_bytes(s.largest_hole), "largest free block in any segment"),
        Headline("External fragmentation", f"{s.external_fragmentation:.2f}",
                 "1 - largest hole / free: 0 = one hole, near 1 = shattered"),
        Headline("Pending free", human_bytes(s.pending_free), "freed, waiting for another stream"),
        Headline("History entries", f"{s.trace_entries:,}", "allocator events recorded"),
    ]


def segment_table(s: SnapshotSummary) -> pd.DataFrame:
    """One row per segment: sizes in MiB, its largest free block and fragmentation index."""
    rows = [{"segment": g.index, "pool": g.segment_type, "device": g.device,
             "address": f"{g.address:#x}", "reserved MiB": g.total / 2**20,
             "allocated MiB": g.allocated / 2**20, "holes": g.holes,
             "free MiB": g.free / 2**20, "largest free block MiB": g.largest_hole / 2**20,
             "rounding waste KiB": g.rounding_waste / 2**10,
             "ext. fragmentation": g.external_fragmentation} for g in s.segments]
    return pd.DataFrame(rows, columns=["segment", "pool", "device", "address", "reserved MiB",
                                       "allocated MiB", "holes", "free MiB",
                                       "largest free block MiB", "rounding waste KiB",
                                       "ext. fragmentation"])


def cell_bytes_for(snap: Snapshot, max_cols: int = MAX_COLS, max_cells: int = MAX_CELLS) -> int:
    """Smallest power of two >= 512 B with the widest segment in max_cols cells and all drawn
    rows in max_cells."""
    rows = max(1, min(len(snap.segments), MAX_ROWS))
    widest = max((g.total_size for g in snap.segments), default=MIN_CELL)
    cell = MIN_CELL
    while -(-widest // cell) > max_cols or rows * -(-widest // cell) > max_cells:
        cell *= 2
    return cell


def _grid(cells: SnapshotCells, values: np.ndarray, fill: float) -> np.ndarray:
    counts = np.diff(np.append(cells.segment_start, values.size))
    out = np.full((counts.size, int(counts.max(initial=0))), fill, np.float64)
    for i, (s, c) in enumerate(zip(cells.segment_start, counts)):
        out[i, :c] = values[s:s + c]
    return out


def snapshot_figure(snap: Snapshot, cell_bytes: int | None = None,
                    max_rows: int = MAX_ROWS) -> go.Figure:
    """Heatmap of segments (rows) x cells; at most max_rows segments (the first ones)."""
    shown = dataclasses.replace(snap, segments=snap.segments[:max_rows])
    cell = cell_bytes or cell_bytes_for(shown)
    cells = snapshot_cells(shown, cell, max_cells=1 << 24)
    z = cells.grid()  # int8 [rows, cols]
    # customdata [rows, cols, 4]: active, rounding waste, hole bytes, offset in the segment
    offset = np.arange(z.shape[1], dtype=np.float64) * cell
    custom = np.stack([_grid(cells, cells.active_bytes, 0), _grid(cells, cells.waste_bytes, 0),
                       _grid(cells, cells.hole_bytes, 0),
                       np.broadcast_to(offset, z.shape)], axis=-1)
    n = len(CELL_STYLE)
    scale = []
    for code in range(n):
        colour = CELL_STYLE[code][0]
        scale += [[code / n, colour], [(code + 1) / n, colour]]
    fig = go.Figure(go.Heatmap(
        z=z, x=np.arange(z.shape[1], dtype=np.int32), y=np.arange(z.shape[0], dtype=np.int32),
        customdata=custom, zmin=-0.5, zmax=n - 0.5, colorscale=scale, xgap=0, ygap=1,
        colorbar=dict(tickvals=list(range(n)), ticktext=[CELL_STYLE[c][1] for c in range(n)],
                      title="cell state"),
        hovertemplate=("segment %{y}, offset %{customdata[3]:,} B<br>active %{customdata[0]:,} B"
                       "<br>rounding waste %{customdata[1]:,} B<br>hole %{customdata[2]:,} B"
                       "<extra></extra>")))
    ticks = [f"#{i} {g.segment_type} {g.total_size / 2**20:,.1f} MiB"
             for i, g in enumerate(shown.segments)]
    fig.update_yaxes(autorange="reversed", tickvals=list(range(len(ticks))), ticktext=ticks,
                     showticklabels=len(ticks) <= 40, title_text="segment")
    fig.update_xaxes(title_text=f"cell ({cell:,} B each) from the segment's start")
    more = len(snap.segments) - len(shown.segments)
    fig.update_layout(
        title=f"{len(shown.segments)} segments" + (f" (first shown; {more} more)" if more
                                                   else ""),
        height=min(900, 160 + 18 * z.shape[0]), margin=dict(l=8, r=8, t=40, b=40),
        plot_bgcolor="#ffffff")
    return fig
