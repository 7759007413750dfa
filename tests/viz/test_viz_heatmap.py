"""kvviz.viz.heatmap: the grid data (blockmap_cells) and the figure built from it."""
from __future__ import annotations

import json

import numpy as np
import pytest

from kvviz.viz import cellstate as cs
from kvviz.viz import heatmap as vh


def decode(spec: dict) -> np.ndarray:
    """A plotly typed array ({'dtype', 'bdata', 'shape'}) back to numpy."""
    import base64

    arr = np.frombuffer(base64.b64decode(spec["bdata"]), dtype=np.dtype(spec["dtype"]))
    if "shape" in spec:
        arr = arr.reshape([int(x) for x in str(spec["shape"]).split(",")])
    return arr


def test_exact_grid_is_one_cell_per_block(sim_maps):
    bm = sim_maps["paged:16"]
    c = vh.blockmap_cells(bm)
    n = bm.num_blocks
    assert c.run == 1 and c.rows * c.cols >= n
    assert c.state.dtype == np.int8
    assert (c.state.ravel()[:n] == cs.classify(bm)).all()
    assert (c.state.ravel()[n:] == cs.PAD).all()
    assert (c.first.ravel()[:n] == np.arange(n)).all()
    detail = c.detail.reshape(-1, 4)[:n]
    assert (detail[:, 0] == bm.owner).all() and (detail[:, 1] == bm.filled).all()
    assert (detail[:, 2] == bm.allocated).all() and (detail[:, 3] == bm.refcount).all()


def test_large_map_is_downsampled_to_runs(million):
    c = vh.blockmap_cells(million)
    assert c.run > 1 and c.rows * c.cols <= vh.DEFAULT_MAX_CELLS
    counts = c.counts.reshape(-1, cs.NUM_STATES)
    cells = -(-million.num_blocks // c.run)
    assert (counts[:cells].sum(axis=1)[:-1] == c.run).all()
    assert (counts[:cells].sum(axis=0) == cs.state_counts(cs.classify(million))).all()
    assert (c.state.ravel()[:cells] == counts[:cells].argmax(axis=1)).all()
    assert c.detail is None


def test_zoom_range_shows_those_blocks(million):
    c = vh.blockmap_cells(million, 1000, 1100)
    assert (c.start, c.stop, c.run) == (1000, 1100, 1)
    assert c.first.ravel()[0] == 1000
    assert (c.state.ravel()[:100] == cs.classify(million)[1000:1100]).all()


def test_range_is_clamped_and_empty_range_refused(sim_maps):
    bm = sim_maps["paged:16"]
    assert vh.blockmap_cells(bm, -5, 10**9).stop == bm.num_blocks
    with pytest.raises(ValueError, match="empty"):
        vh.blockmap_cells(bm, 10, 10)


def test_max_cells_sets_the_run_length(sim_maps):
    bm = sim_maps["contiguous:first-fit:max"]  # 32768 one-slot cells
    c = vh.blockmap_cells(bm, max_cells=2048)
    assert c.run == 16 and (c.counts.sum(axis=2).ravel() == 16).all()


def test_figure_carries_int8_states_and_int32_hover(sim_maps):
    bm = sim_maps["paged:16:prefix"]
    fig = vh.blockmap_figure(bm)
    spec = json.loads(fig.to_json())["data"][0]
    assert spec["z"]["dtype"] == "i1" and spec["customdata"]["dtype"] == "i4"
    c = vh.blockmap_cells(bm)
    assert (decode(spec["z"]) == c.state).all()
    custom = decode(spec["customdata"])
    assert (custom[..., 0] == c.first).all() and (custom[..., 1] == c.detail[..., 0]).all()
    assert "owner seq" in spec["hovertemplate"] and "refcount" in spec["hovertemplate"]


def test_downsampled_hover_lists_counts(million):
    spec = json.loads(vh.blockmap_figure(million).to_json())["data"][0]
    assert "mostly" in spec["hovertemplate"] and "Tail waste" in spec["hovertemplate"]
    assert decode(spec["customdata"]).shape[-1] == 1 + cs.NUM_STATES


@pytest.mark.parametrize(("run", "block_size", "text"), [
    (1, 1, "1 cell = 1 slot"), (64, 1, "1 cell = 64 slots"),
    (1, 16, "1 cell = 1 block of 16 slots"), (1024, 16, "1 cell = 1,024 blocks of 16 slots"),
])
def test_cell_unit_names_what_a_cell_stands_for(run, block_size, text):
    assert vh.cell_unit(run, block_size) == text

