"""The Live page's block-map heatmap, drawn by the browser on a canvas that stays mounted.

A plotly heatmap that Streamlit receives anew every second is re-mounted and drawn from
scratch (twice) in every tab, the browser's largest cost with several tabs
(docs/BENCHMARKS.md, decision log). This renderer is a Streamlit custom component (v2, no iframe):
Streamlit calls `blockcanvas.js` again with new data and the canvas repaints the grid in
place (one pass over a typed array); the hover box follows the data under a still mouse.

`canvas_data` is the pure data step (no streamlit): the same grid as
`heatmap.blockmap_cells`, flattened to one row per cell in a DataFrame whose numpy columns
Streamlit sends as Arrow; `JS` and `CSS` are the renderer, registered by pages/blockview.py.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from kvviz.core.blockmap import BlockMap
from kvviz.viz import cellstate, theme
from kvviz.viz import heatmap as vh

_HERE = Path(__file__).resolve().parent
JS = (_HERE / "blockcanvas.js").read_text(encoding="utf-8")
CSS = (_HERE / "blockcanvas.css").read_text(encoding="utf-8")
DETAIL_COLUMNS = ("owner", "filled", "allocated", "refcount")  # one cell per block
COUNT_COLUMNS = tuple(f"n_{name}" for name in cellstate.STATE_NAMES)  # a run of blocks per cell
RUN_COLUMNS = ("owner", "owners")  # a run per cell: its first owner, how many sequences own it
ALT = "alt"  # contiguous maps: 1 where the owner is an odd sequence in address order


def owner_parity(owner: np.ndarray) -> np.ndarray:
    """int8 per block: 0/1 alternating from one owning sequence to the next in address
    order (free blocks 0), so neighbouring sequences can be drawn in two shades."""
    owned = owner >= 0
    change = np.ones(owner.shape, bool)
    change[1:] = owner[1:] != owner[:-1]
    return ((np.cumsum(change & owned) % 2) * owned).astype(np.int8)


def run_owners(owner: np.ndarray, run: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per run of `run` blocks: the first owned block's index (-1: none), its owner (-1) and
    the number of sequences that own blocks in it."""
    n = owner.shape[0]
    starts = np.arange(0, n, run)
    owned = owner >= 0
    pos = np.where(owned, np.arange(n), n)
    first = np.minimum.reduceat(pos, starts)
    who = np.where(first < n, owner[np.minimum(first, n - 1)], -1)
    change = np.ones(n, bool)
    change[1:] = owner[1:] != owner[:-1]
    begins = (change & owned).astype(np.int32)
    begins[starts] = owned[starts]  # a sequence running in from the previous cell counts
    return np.where(first < n, first, -1), who.astype(np.int32), np.add.reduceat(begins, starts)


def narrow(a: np.ndarray) -> np.ndarray:
    """`a` as the smallest of int8 / int16 / int32 that holds its values (less to send)."""
    if a.size == 0:
        return a.astype(np.int8)
    lo, hi = int(a.min()), int(a.max())
    for dt in (np.int8, np.int16, np.int32):
        info = np.iinfo(dt)
        if info.min <= lo and hi <= info.max:
            return a.astype(dt, copy=False)
    raise ValueError(f"values {lo}..{hi} do not fit int32")


def canvas_data(
    bm: BlockMap, start: int = 0, stop: int | None = None, *,
    max_cells: int = vh.DEFAULT_MAX_CELLS, title: str | None = None,
) -> dict:
    """{"meta": ..., "cells": DataFrame} for blocks [start, stop) of `bm`.

    cells has one row per grid cell in address order (no padding): `state` (int8, the
    dominant state of the cell's run), then per block `owner, filled, allocated, refcount`
    when a cell is one block, else `n_<state>` (blocks of the run in each state). The first
    block of cell i is meta["start"] + i * meta["run"].
    """
    c = vh.blockmap_cells(bm, start, stop, max_cells=max_cells)
    ncell = -(-(c.stop - c.start) // c.run)
    per_state = c.counts.reshape(-1, cellstate.NUM_STATES)[:ncell]
    cols = {"state": c.state.reshape(-1)[:ncell]}
    if c.run == 1:
        names, values = DETAIL_COLUMNS, c.detail.reshape(-1, len(DETAIL_COLUMNS))[:ncell]
    else:
        names, values = COUNT_COLUMNS, per_state
    for j, name in enumerate(names):
        cols[name] = narrow(values[:, j])
    owner = bm.owner[c.start:c.stop]
    first, who, many = (None, None, None) if c.run == 1 else run_owners(owner, c.run)
    if c.run > 1:
        cols["owner"], cols["owners"] = narrow(who), narrow(many)
    if bm.contiguous:  # neighbouring sequences in two shades (parity at the cell's owner)
        par = owner_parity(owner)
        cols[ALT] = par if c.run == 1 else np.where(first >= 0, par[np.maximum(first, 0)],
                                                    0).astype(np.int8)
    counts = per_state.sum(axis=0)
    span = c.stop - c.start
    per_cell = vh.cell_unit(c.run, bm.block_size)
    unit = "slots" if bm.block_size == 1 else "blocks"
    meta = {
        "title": title or bm.label,
        "subtitle": f"{unit} {c.start:,}-{c.stop - 1:,} of {bm.num_blocks:,}; {per_cell}",
        "unit": unit[:-1], "alt": bool(bm.contiguous),
        "summary": "; ".join(f"{s.label} {100 * counts[s.code] / span:.1f}%"
                             for s in theme.STATES if counts[s.code]),
        "rows": c.rows, "cols": c.cols, "cells": int(ncell), "run": c.run,
        "start": c.start, "stop": c.stop, "num_blocks": bm.num_blocks,
        "block_size": bm.block_size,
        "colours": list(theme.STATE_COLOURS), "labels": list(theme.STATE_LABELS),
        "count_columns": list(COUNT_COLUMNS),
    }
    return {"meta": meta, "cells": pd.DataFrame(cols)}
