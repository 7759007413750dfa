"""A zoom made on a Live heatmap survives the tick the browser requested before it had the
zoomed slider (that request still carries the slider's old range), and the slider stays the
user's to move afterwards. The page's session state is a dict here; each call of
zoom_slider is one run of the panel with the slider value the request carried."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from pages import blockview, live_lane

FULL = (0.0, 100.0)
KEY = "live_heat_2"


@pytest.fixture
def state(monkeypatch) -> dict:
    session: dict = {}
    monkeypatch.setattr(live_lane, "st", SimpleNamespace(session_state=session))
    monkeypatch.setattr(blockview, "zoom", lambda key: session.setdefault(key, FULL))
    return session


def drag(state: dict, start: int, stop: int) -> None:
    state[KEY] = SimpleNamespace(zoom={"start": start, "stop": stop})
    live_lane.zoom_to(KEY, 512)


def run(state: dict, slider: tuple[float, float] | None = None) -> tuple[float, float]:
    """One run of the panel; `slider`: the value the browser's request carried."""
    if slider is not None:
        state[live_lane.ZOOM_KEY] = slider
    return live_lane.zoom_slider()


def test_a_stale_tick_does_not_undo_a_zoom(state):
    run(state)
    drag(state, 128, 256)
    assert run(state) == (25.0, 50.0)  # the zoom's own run
    assert run(state, FULL) == (25.0, 50.0)  # requested before the browser had it
    assert run(state, FULL) == (25.0, 50.0)  # the history fragment's stale tick may follow
    assert run(state, (25.0, 50.0)) == (25.0, 50.0)  # the browser shows the zoom
    assert run(state, FULL) == FULL  # the user dragged the slider back: theirs
    assert live_lane.ZOOM_ASKED not in state


def test_the_slider_moved_after_a_zoom_is_the_users(state):
    run(state)
    drag(state, 128, 256)
    run(state)
    assert run(state, (10.0, 20.0)) == (10.0, 20.0)
    assert run(state, FULL) == FULL
    assert live_lane.ZOOM_ASKED not in state


def test_a_double_click_after_a_zoom_shows_everything(state):
    run(state)
    drag(state, 128, 256)
    run(state)
    run(state, (25.0, 50.0))
    state[KEY] = SimpleNamespace(zoom={"reset": True})
    live_lane.zoom_to(KEY, 512)
    assert run(state) == FULL
    assert run(state, (25.0, 50.0)) == FULL  # a stale tick of the zoomed slider
    assert run(state, FULL) == FULL


def test_a_zoom_to_the_range_shown_leaves_nothing_pending(state):
    run(state)
    state[KEY] = SimpleNamespace(zoom={"reset": True})
    live_lane.zoom_to(KEY, 512)
    assert live_lane.ZOOM_ASKED not in state
    assert run(state) == FULL


def test_zooming_in_re_bins_each_lane_down_to_one_slot_or_block_a_cell():
    """Every narrower range gives finer cells, down to one slot (contiguous) or one block
    (paged) per cell; a coarse lane beside does not hold a fine one back."""
    from kvviz.core.blockmap import empty_blockmap
    from kvviz.viz import blockcanvas as vc

    contiguous = empty_blockmap(16_384, 1, label="contiguous:first-fit:pow2", contiguous=True)
    paged256 = empty_blockmap(64, 256, label="paged:256")
    runs = []
    for lo, hi in [(0.0, 100.0), (0.0, 50.0), (0.0, 20.0)]:
        a, b = blockview.block_range(contiguous, lo, hi)
        meta = vc.canvas_data(contiguous, a, b,
                              max_cells=blockview.lane_max_cells(contiguous, lo, hi))["meta"]
        runs.append(meta["run"])
        coarse = blockview.lane_max_cells(paged256, lo, hi)
        assert coarse == blockview.block_range(paged256, lo, hi)[1] - \
            blockview.block_range(paged256, lo, hi)[0]  # one block a cell, always
    assert runs == sorted(runs, reverse=True) and len(set(runs)) == len(runs)
    assert runs[-1] == 1 and "1 cell = 1 slot" in meta["subtitle"]
