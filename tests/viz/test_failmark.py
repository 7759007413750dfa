"""The refused request's mark sits on the heatmap's own cells: the largest hole, the need."""
from __future__ import annotations

import numpy as np
import pytest

from kvviz.core.config import LaneSpec
from kvviz.engine.kvpool import KVPool
from kvviz.viz import failmark as fm
from kvviz.viz import heatmap as vh


def _first_fit(capacity: int) -> KVPool:
    return KVPool(LaneSpec("contiguous", 1, "first-fit"), capacity)


def _fragmented() -> KVPool:
    c = _first_fit(256)
    for seq, n in enumerate((40, 30, 60, 20, 50)):
        assert c.admit(seq, n).ok
    c.release(1)  # hole of 30 at 40..69
    c.release(3)  # hole of 20 at 130..149; 56 free at the end (200..255)
    return c


def _covered(fig, name: str) -> set[int]:
    """First slot of every heatmap cell whose centre lies inside a shape called `name`."""
    hm = fig.data[0]
    xs, ys = np.asarray(hm.x), np.asarray(hm.y)
    out = set()
    for sh in fig.layout.shapes:
        if sh.name != name:
            continue
        for y in ys:
            for x in xs:
                if sh.x0 < x < sh.x1 and sh.y0 < y < sh.y1:
                    out.add(int(y + x))
    return out


@pytest.mark.parametrize("max_cells", [256, 64])  # one cell per slot, and 4 slots per cell
def test_fragmentation_outlines_the_largest_hole_and_the_need_from_its_start(max_cells):
    c = _fragmented()
    adm = c.admit(9, 70)
    assert adm.reason.value == "FRAGMENTATION"
    bm = c.snapshot()
    f = fm.Failure("FRAGMENTATION", adm.need_tokens, adm.free_tokens,
                   adm.largest_hole_tokens, 9, 1.0)
    fig = vh.blockmap_figure(bm, max_cells=max_cells)
    mark = fm.mark_failure(fig, bm, f, max_cells=max_cells)
    assert mark.hole == (200, 256) and mark.need == (200, 270)
    run = max(1, 256 // max_cells)
    assert _covered(fig, "largest hole") == set(range(200, 256, run))
    assert _covered(fig, "need") == set(range(200, 256, run))  # clipped at the end
    assert "past the hole's end into the end of the cache" in mark.text


def test_a_need_inside_the_map_runs_into_held_slots():
    c = _first_fit(128)
    for seq, n in enumerate((30, 40, 58)):
        assert c.admit(seq, n).ok
    c.release(1)  # the only hole: 30..69
    bm = c.snapshot()
    fig = vh.blockmap_figure(bm)
    mark = fm.mark_failure(fig, bm, fm.Failure("CAPACITY", 50, 40, 40, 5, 0.5))
    assert mark.hole == (30, 70) and _covered(fig, "need") == set(range(30, 80))
    assert "true out-of-memory" in mark.text


def test_paged_capacity_outlines_the_free_blocks():
    p = KVPool(LaneSpec("paged", 16), 16 * 16)
    for seq in range(6):
        assert p.admit(seq, 32).ok  # 12 blocks held
    p.release(2)
    bm = p.snapshot()
    fig = vh.blockmap_figure(bm)
    mark = fm.mark_failure(fig, bm, fm.Failure("CAPACITY", 160, 96, 96, 7, 2.0))
    free = set((np.flatnonzero(bm.is_free) * 16).tolist())
    assert _covered(fig, "free blocks") == free and mark.hole is None
    assert "add up to less than the need" in mark.text
