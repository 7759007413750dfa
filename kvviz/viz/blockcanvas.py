"""The Live page's block-map heatmap, drawn by the browser on a canvas that stays mounted.

A plotly heatmap that Streamlit receives anew every second is re-mounted and drawn from
scratch (twice) in every tab, the browser's largest cost with several tabs
(docs/BENCHMARKS.md, decision log). This renderer is a Streamlit custom component (v2, no iframe):
Streamlit calls `blockcanvas.js` again with new data and the canvas repaints the grid in
place (one pass over a typed array); the hover box follows the data under a still mouse.

`canvas_data` is the pure data step (no streamlit): the same grid as
`heatmap.blockmap_cells`, flattened to one row per cell in a DataFrame whose numpy columns
Streamlit sends as Arrow; `JS` and `CSS` are the renderer, registered by pages/common.py.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from kvviz import cellstate
from kvviz.blockmap import BlockMap
from kvviz.viz import heatmap as vh
from kvviz.viz import theme

_HERE = Path(__file__).resolve().parent
JS = (_HERE / "blockcanvas.js").read_text(encoding="utf-8")
CSS = (_HERE / "blockcanvas.css").read_text(encoding="utf-8")
DETAIL_COLUMNS = ("owner", "filled", "allocated", "refcount")  # one cell per block
COUNT_COLUMNS = tuple(f"n_{name}" for name in cellstate.STATE_NAMES)  # a run of blocks per cell


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
    counts = per_state.sum(axis=0)
    span = c.stop - c.start
    per_cell = vh.cell_unit(c.run, bm.block_size)
    meta = {
        "title": title or bm.label,
        "subtitle": f"blocks {c.start:,}-{c.stop - 1:,} of {bm.num_blocks:,}; {per_cell}",
        "summary": "; ".join(f"{s.label} {100 * counts[s.code] / span:.1f}%"
                             for s in theme.STATES if counts[s.code]),
        "rows": c.rows, "cols": c.cols, "cells": int(ncell), "run": c.run,
        "start": c.start, "stop": c.stop, "num_blocks": bm.num_blocks,
        "block_size": bm.block_size,
        "colours": list(theme.STATE_COLOURS), "labels": list(theme.STATE_LABELS),
        "count_columns": list(COUNT_COLUMNS),
    }
    return {"meta": meta, "cells": pd.DataFrame(cols)}
