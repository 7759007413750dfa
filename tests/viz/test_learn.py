"""Learn figures: slot codes match the allocators' maps; the drawings carry numpy arrays."""
from __future__ import annotations

import numpy as np
import pytest

from kvviz import story
from kvviz.core.blockmap import empty_blockmap
from kvviz.viz import cellstate, theme
from kvviz.viz import learn as vl

OWNERS = sorted(story.NAMES)


def _step(key: str) -> story.Step:
    return next(s for s in story.build_story() if s.key == key)


def test_slot_codes_of_the_reservations() -> None:
    codes = vl.slot_codes(_step("reserve").line, OWNERS)
    assert codes.dtype == np.int8 and codes.shape == (story.SLOTS,)
    u, r, f = cellstate.USED, cellstate.RESERVED, cellstate.FREE
    # A: 5 written, 3 reserved; B: 9 + 3; C: 6 + 2; 4 free at the end
    expect = [u] * 5 + [r] * 3 + [u] * 9 + [r] * 3 + [u] * 6 + [r] * 2 + [f] * 4
    assert codes.tolist() == expect


def test_slot_codes_of_paged_blocks_follow_fill() -> None:
    step = _step("paged")
    codes = vl.slot_codes(step.paged, OWNERS)
    d = np.repeat(step.paged.owner, step.paged.block_size) == story.D_ID
    assert int((codes[d] == cellstate.USED).sum()) == story.D_TOKENS
    assert set(codes[d].tolist()) == {cellstate.USED, cellstate.TAIL}  # 2 slots of tail
    assert int((codes == cellstate.FREE).sum()) == 0  # D took the last free blocks


def test_colours_mean_what_they_mean_on_live() -> None:
    """Purple is Live's shared prefix: on Learn it marks shared blocks, never a request."""
    purple = theme.STATES[cellstate.SHARED].colour
    scale = vl._colourscale()
    assert [c for _, c in scale[::2]] == [s.colour for s in theme.STATES]
    for step in story.build_story():
        maps = [m for m in (step.line, step.paged) if m is not None]
        maps += [m for _, m in step.pictures]
        for bm in maps:
            codes = vl.slot_codes(bm, sorted(step.names or story.NAMES))
            shared = np.repeat(bm.refcount > 1, bm.block_size) & (
                np.repeat(bm.owner, bm.block_size) >= 0)
            assert ((codes == cellstate.SHARED) == (shared & (codes != cellstate.TAIL))).all()
    d_codes = vl.slot_codes(_step("paged").paged, OWNERS)
    assert cellstate.SHARED not in d_codes.tolist()  # D is not drawn in purple
    assert any(cellstate.SHARED in vl.slot_codes(m, sorted(_step("prefix").names)).tolist()
               for _, m in _step("prefix").pictures)
    assert purple == scale[2 * cellstate.SHARED][1]


def test_slot_codes_need_every_owner() -> None:
    with pytest.raises(ValueError, match="missing"):
        vl.slot_codes(_step("reserve").line, [0, 1])


def test_line_figure_is_one_row_heatmap_with_labels_and_holes() -> None:
    fig = vl.slot_line_figure(_step("finish").line, story.NAMES)
    hm = fig.data[0]
    assert hm.type == "heatmap" and isinstance(hm.z, np.ndarray) and hm.z.shape == (1, 32)
    texts = [a.text for a in fig.layout.annotations]
    assert "<b>A</b>" in texts and "<b>C</b>" in texts and "<b>B</b>" not in texts
    assert "hole: 12 slots" in texts and "hole: 4 slots" in texts


def test_paged_figure_draws_the_block_table_with_one_arrow_per_entry() -> None:
    step = _step("paged")
    fig = vl.slot_line_figure(step.paged, story.NAMES, table=step.table,
                              table_owner=story.D_ID)
    arrows = [a for a in fig.layout.annotations if a.showarrow]
    assert len(arrows) == step.table.size
    bs = step.paged.block_size
    assert sorted(a.x for a in arrows) == sorted(b * bs + (bs - 1) / 2 for b in step.table)
    assert any(a.text == f"D[0] → block {step.table[0]}" for a in fig.layout.annotations)
    assert sum(s.type == "line" for s in fig.layout.shapes) == step.paged.num_blocks - 1


def test_tail_waste_is_marked_on_ds_last_block() -> None:
    step = _step("tail")
    fig = vl.slot_line_figure(step.paged, story.NAMES, tail_owner=story.D_ID)
    rects = [s for s in fig.layout.shapes if s.type == "rect"]
    assert len(rects) == 1
    last = int(step.table[-1])
    assert rects[0].x1 - rects[0].x0 == (-story.D_TOKENS) % story.PAGE
    assert rects[0].x1 == pytest.approx((last + 1) * story.PAGE - 0.5)


def test_an_empty_line_draws() -> None:
    fig = vl.slot_line_figure(empty_blockmap(8, 1, contiguous=True), {})
    assert np.asarray(fig.data[0].z).max() == 0


def test_tradeoff_figure_values() -> None:
    pts = story.tradeoff(np.array([3, 17, 40], np.int64), (1, 4, 16))
    fig = vl.tradeoff_figure(pts, selected=4)
    bar, line = fig.data
    assert np.asarray(bar.y) == pytest.approx([p.tail_share for p in pts])
    assert np.asarray(line.y).tolist() == [p.table_entries for p in pts]
    assert list(bar.marker.color).count(vl.theme.STATES[vl.cellstate.TAIL].colour) == 1
