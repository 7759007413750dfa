from __future__ import annotations

import numpy as np
import pytest

from kvviz.core.blockmap import FREE
from kvviz.torchsnap.safe_pickle import parse_snapshot
from kvviz.torchsnap.summary import (
    CELL_ACTIVE,
    CELL_HOLE,
    CELL_UNMAPPED,
    CELL_WASTE,
    segment_blockmap,
    snapshot_cells,
    summarize,
)
from tests.torchsnap.snaps import MiB, make_snapshot


@pytest.fixture()
def snap():
    return parse_snapshot(make_snapshot())


def test_large_segment_accounting(snap):
    s = summarize(snap).segments[0]
    assert (s.total, s.allocated, s.pending_free) == (20 * MiB, 10 * MiB, 1 * MiB)
    assert (s.rounding_waste, s.requested) == (1000, 10 * MiB - 1000)
    assert (s.free, s.holes, s.largest_hole) == (9 * MiB, 3, 4 * MiB)
    assert s.external_fragmentation == pytest.approx(1 - 4 / 9)
    assert s.allocated + s.pending_free + s.free + s.uncovered == s.total


def test_small_segment_rounding_waste(snap):
    s = summarize(snap).segments[1]
    assert s.rounding_waste == (512 - 100) + (1024 - 1000)
    assert s.free == 2 * MiB - 1536 and s.largest_hole == 2 * MiB - 3072


def test_totals_and_fragmentation_index(snap):
    t = summarize(snap)
    free = 9 * MiB + 2 * MiB - 1536
    assert (t.reserved, t.free, t.largest_hole, t.holes) == (22 * MiB, free, 4 * MiB, 5)
    assert t.external_fragmentation == pytest.approx(1 - 4 * MiB / free)
    assert t.requested_known and t.uncovered == 0
    assert t.pools["large"]["largest_hole"] == 4 * MiB
    assert t.pools["small"]["free"] == 2 * MiB - 1536


def test_no_free_memory_means_no_fragmentation():
    raw = {"segments": [{"address": 0, "total_size": 512,
                         "blocks": [{"size": 512, "requested_size": 512,
                                     "state": "active_allocated"}]}]}
    t = summarize(parse_snapshot(raw))
    assert t.free == 0 and t.external_fragmentation == 0.0


def test_missing_requested_size_is_flagged_not_guessed():
    raw = {"segments": [{"address": 0, "total_size": 1024,
                         "blocks": [{"size": 1024, "state": "active_allocated"}]}]}
    t = summarize(parse_snapshot(raw))
    assert not t.requested_known and t.rounding_waste == 0


def test_to_dict_carries_the_index(snap):
    d = summarize(snap).to_dict()
    assert d["external_fragmentation"] == pytest.approx(summarize(snap).external_fragmentation)
    assert d["segments"][0]["external_fragmentation"] == pytest.approx(1 - 4 / 9)


def test_cells_conserve_bytes_per_category(snap):
    cells = snapshot_cells(snap)
    t = summarize(snap)
    assert cells.cell_bytes == 512  # 45056 cells fit the default budget
    assert int(cells.hole_bytes.sum()) == t.free
    assert int(cells.waste_bytes.sum()) == t.rounding_waste
    assert int(cells.active_bytes.sum()) == t.requested + t.pending_free
    assert list(cells.segment_start) == [0, 20 * MiB // 512]


def test_auto_cell_size_is_a_power_of_two_within_budget(snap):
    cells = snapshot_cells(snap, max_cells=100)
    assert cells.cell_bytes == 512 * 2 ** 9 and cells.state.size <= 100


def test_cell_states_at_one_mib(snap):
    cells = snapshot_cells(snap, cell_bytes=MiB)
    a, h = CELL_ACTIVE, CELL_HOLE
    assert list(cells.state[:20]) == [a] * 4 + [h] * 2 + [a] * 6 + [h] * 3 + [a] + [h] * 4
    assert cells.waste_bytes[3] == 1000
    assert list(cells.state[20:]) == [h, h]  # the small segment is mostly hole


def test_waste_and_unmapped_states():
    raw = {"segments": [{"address": 0, "total_size": 2560, "blocks": [
        {"size": 2048, "requested_size": 100, "state": "active_allocated"},
        {"size": 512, "state": "inactive"}]}]}
    cells = snapshot_cells(parse_snapshot(raw), cell_bytes=2048)
    assert list(cells.state) == [CELL_WASTE, CELL_UNMAPPED]  # 2nd cell: 512 hole, 1536 beyond
    assert cells.grid().shape == (1, 2)


def test_ties_show_the_allocator_state_not_unmapped():
    raw = {"segments": [{"address": 0, "total_size": 1536, "blocks": [
        {"size": 1024, "requested_size": 1024, "state": "active_allocated"},
        {"size": 512, "state": "inactive"}]}]}
    cells = snapshot_cells(parse_snapshot(raw), cell_bytes=1024)
    assert list(cells.state) == [CELL_ACTIVE, CELL_HOLE]  # 512 hole vs 512 beyond the end


def test_grid_has_one_row_per_segment(snap):
    g = snapshot_cells(snap).grid()
    assert g.shape == (2, 20 * MiB // 512)
    assert (g[1, 2 * MiB // 512:] == CELL_UNMAPPED).all()


def test_segment_blockmap_matches_the_summary(snap):
    seg = snap.segments[0]
    bm = segment_blockmap(seg)
    s = summarize(snap).segments[0]
    assert bm.contiguous and bm.block_size == 512 and bm.num_blocks == 20 * MiB // 512
    assert int(bm.is_free.sum()) * 512 == s.free
    assert int((bm.allocated - bm.filled).sum()) == s.rounding_waste
    assert set(np.unique(bm.owner[bm.owner != FREE])) == {0, 2, 4}  # block ordinals
    runs = np.diff(np.flatnonzero(np.diff(np.r_[0, bm.is_free.astype(np.int8), 0])))[::2]
    assert int(runs.max()) * 512 == s.largest_hole
