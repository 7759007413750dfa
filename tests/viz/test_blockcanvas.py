"""kvviz.viz.blockcanvas: the data the Live page's canvas heatmap draws."""
from __future__ import annotations

import numpy as np
import pytest

from kvviz.viz import blockcanvas as vc
from kvviz.viz import cellstate as cs
from kvviz.viz import heatmap as vh
from kvviz.viz import theme


def test_one_cell_per_block_carries_state_and_block_detail(sim_maps):
    bm = sim_maps["paged:16:prefix"]
    d = vc.canvas_data(bm, title="paged lane")
    meta, cells = d["meta"], d["cells"]
    n = bm.num_blocks
    assert meta["run"] == 1 and meta["cells"] == n == len(cells)
    assert meta["rows"] * meta["cols"] >= n > (meta["rows"] - 1) * meta["cols"]
    assert list(cells.columns) == ["state", *vc.DETAIL_COLUMNS]
    assert cells["state"].dtype == np.int8
    assert (cells["state"].to_numpy() == cs.classify(bm)).all()
    for name in vc.DETAIL_COLUMNS:
        assert (cells[name].to_numpy() == getattr(bm, name)).all(), name
    assert meta["title"] == "paged lane"
    assert meta["subtitle"] == f"blocks 0-{n - 1:,} of {n:,}; 1 cell = 1 block of 16 slots"
    assert meta["colours"] == list(theme.STATE_COLOURS)
    assert meta["labels"][cs.PAD] == "past the end"


def test_downsampled_cells_count_every_block_of_their_run(million):
    d = vc.canvas_data(million, max_cells=1024)
    meta, cells = d["meta"], d["cells"]
    run = meta["run"]
    assert run == 1024 and meta["cells"] == len(cells) == 1024
    assert list(cells.columns) == ["state", *vc.COUNT_COLUMNS, *vc.RUN_COLUMNS]
    counts = cells[list(vc.COUNT_COLUMNS)].to_numpy()
    assert (counts.sum(axis=1) == run).all()
    assert (counts.sum(axis=0) == cs.state_counts(cs.classify(million))).all()
    assert (cells["state"].to_numpy() == counts.argmax(axis=1)).all()
    for name in vc.COUNT_COLUMNS:  # each column as narrow as its largest count allows
        assert cells[name].dtype == (np.int8 if cells[name].max() <= 127 else np.int16), name
    assert cells["n_shared"].dtype == np.int16  # about half of each run of 1,024 is shared
    assert meta["subtitle"].endswith("; 1 cell = 1,024 blocks of 16 slots")


def test_same_grid_as_the_plotly_heatmap(million):
    """Replay still draws plotly (vh.blockmap_figure): both show the same cells."""
    c = vh.blockmap_cells(million, 1000, 200_000)
    d = vc.canvas_data(million, 1000, 200_000)
    assert (d["meta"]["rows"], d["meta"]["cols"], d["meta"]["run"]) == (c.rows, c.cols, c.run)
    assert (d["meta"]["start"], d["meta"]["stop"]) == (1000, 200_000)
    assert (d["cells"]["state"].to_numpy() == c.state.ravel()[: d["meta"]["cells"]]).all()


def test_zoomed_range_starts_at_its_first_block(sim_maps):
    bm = sim_maps["contiguous:first-fit:max"]
    d = vc.canvas_data(bm, 100, 160)
    assert (d["meta"]["start"], d["meta"]["stop"], d["meta"]["cells"]) == (100, 160, 60)
    assert (d["cells"]["owner"].to_numpy() == bm.owner[100:160]).all()


def test_summary_gives_each_present_state_share(sim_maps):
    bm = sim_maps["paged:16"]
    d = vc.canvas_data(bm)
    counts = cs.state_counts(cs.classify(bm))
    for s in theme.STATES:
        share = f"{s.label} {100 * counts[s.code] / bm.num_blocks:.1f}%"
        assert (share in d["meta"]["summary"]) == bool(counts[s.code]), share


@pytest.mark.parametrize(("values", "dtype"), [
    ([0, 127], np.int8), ([-128, 5], np.int8), ([0, 128], np.int16), ([-129, 0], np.int16),
    ([0, 32768], np.int32), ([-(2**31), 2**31 - 1], np.int32), ([], np.int8),
])
def test_narrow_picks_the_smallest_int_that_holds_the_values(values, dtype):
    out = vc.narrow(np.array(values, np.int64))
    assert out.dtype == dtype and (out == np.array(values)).all()


def test_narrow_refuses_values_past_int32():
    with pytest.raises(ValueError, match="do not fit int32"):
        vc.narrow(np.array([0, 2**31], np.int64))


def test_renderer_sources_are_packaged():
    assert "export default function" in vc.JS
    assert ".kvmap-tip" in vc.CSS
    # the column names the renderer reads are the ones canvas_data writes
    for name in ("state", *vc.DETAIL_COLUMNS):
        assert f'"{name}"' in vc.JS, name


def test_a_contiguous_lane_names_slots_and_shades_neighbouring_sequences_apart(sim_maps):
    bm = sim_maps["contiguous:first-fit:max"]
    d = vc.canvas_data(bm, 100, 160)
    assert d["meta"]["subtitle"].startswith(f"slots 100-159 of {bm.num_blocks:,}")
    assert d["meta"]["unit"] == "slot" and d["meta"]["alt"] is True
    full = vc.canvas_data(bm)["cells"]
    owner, alt = full["owner"].to_numpy(), full["alt"].to_numpy()
    owned = owner >= 0
    assert (alt[~owned] == 0).all()
    edge = np.flatnonzero(owned[1:] & owned[:-1] & (owner[1:] != owner[:-1]))
    assert edge.size, "the fixture should hold adjacent sequences"
    assert (alt[edge] != alt[edge + 1]).all()  # two sequences side by side: two shades
    same = np.flatnonzero(owned[1:] & (owner[1:] == owner[:-1]))
    assert (alt[same] == alt[same + 1]).all()  # one sequence: one shade


def test_paged_maps_keep_one_shade_and_say_blocks(sim_maps):
    d = vc.canvas_data(sim_maps["paged:16"])
    assert d["meta"]["unit"] == "block" and d["meta"]["alt"] is False
    assert "alt" not in d["cells"].columns


def test_a_downsampled_cell_names_its_first_owner_and_how_many_own_it():
    owner = np.array([-1, -1, 7, 7, 7, 9, -1, -1, -1, 4, 4, 4], np.int32)
    first, who, many = vc.run_owners(owner, 4)
    assert first.tolist() == [2, 4, 9] and who.tolist() == [7, 7, 4]
    assert many.tolist() == [1, 2, 1]
    assert vc.owner_parity(owner).tolist() == [0, 0, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1]


def test_replays_plotly_heatmap_says_slots_for_a_contiguous_lane(sim_maps):
    fig = vh.blockmap_figure(sim_maps["contiguous:first-fit:max"], 0, 64)
    assert "<sup>slots 0-63 of" in fig.layout.title.text
    assert fig.data[0].hovertemplate.startswith("slot %{customdata[0]}")
    paged = vh.blockmap_figure(sim_maps["paged:16"])
    assert "<sup>blocks 0-" in paged.layout.title.text
