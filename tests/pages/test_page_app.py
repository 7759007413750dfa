"""app.py and the Live page: the demo collector starts once, the heatmaps show its data."""
from __future__ import annotations

import html
import os
import time
from types import SimpleNamespace

import numpy as np
import pytest

from kvviz.runs import directory, jobs
from kvviz.viz import cellstate as cs
from kvviz.viz import heatmap as vh
from kvviz.viz import timeseries as vt
from kvviz.viz import vegalite as vl
from pages import blockview, democollector, runpicker
from tests.pages.pagehelpers import canvases, figures, no_exception, page, rerun_until, vega_charts


def test_app_opens_on_live_and_starts_the_collector(runs):
    at = page("app.py")
    no_exception(at)
    assert at.title[0].value == "Live KV cache"
    assert at.sidebar.selectbox[0].value == runpicker.LIVE
    assert any("Collector running" in s.value for s in at.success)
    rerun_until(at, lambda a: len(canvases(a)) == len(jobs.DEMO.lanes))
    assert len(headline_grids(at)) == 3  # one grid of eight numbers per lane
    assert any(r.name.startswith("live-") for r in directory.list_runs(runs))


def headline_grids(at) -> list[str]:
    return [h.body for h in at.get("html") if "Largest hole" in h.body]


def test_headline_numbers_are_the_latest_samples(runs):
    at = page("app.py", run="rec.db")
    no_exception(at)
    grids = headline_grids(at)
    r = directory.open_run(runs, "rec.db")
    try:
        lanes, samples = r.lanes(), r.samples()
    finally:
        r.close()
    assert len(grids) == len(lanes) == 2
    for grid, lane in zip(grids, lanes):
        row = samples[samples["lane"] == lane].iloc[-1]
        for h in vt.headline(row):
            assert f">{html.escape(h.label)}</span></div>" in grid
            assert f">{html.escape(h.value)}</div>" in grid
            assert f'title="{html.escape(h.help)}"' in grid


def test_lane_picker_is_filled_on_the_very_first_open(runs):
    at = page("app.py")  # the collector has just been started: its recording may not exist
    no_exception(at)
    lanes = at.sidebar.multiselect[0]
    assert list(lanes.options) == [s.label for s in jobs.DEMO.lanes]
    assert lanes.value == [s.label for s in jobs.DEMO.lanes]  # all three shown side by side


def test_collector_starts_once_per_server(runs):
    first = page("app.py")
    rerun_until(first, lambda a: len(canvases(a)) == 3)
    pid = democollector.collector().status().pid
    second = page("app.py")  # another browser session
    no_exception(second)
    assert democollector.collector().status().pid == pid
    assert len([r for r in directory.list_runs(runs) if r.name.startswith("live-")]) == 1


def test_live_heatmap_data_is_the_recordings_block_map(runs):
    at = page("app.py", run="rec.db")
    no_exception(at)
    shown = canvases(at)
    assert len(shown) == 2
    r = directory.open_run(runs, "rec.db")
    try:
        lanes = r.lanes()
        bms = [r.latest_blockmap(lane)[0] for lane in lanes]
    finally:
        r.close()
    for (meta, cells), bm, lane in zip(shown, bms, lanes):
        grid = vh.blockmap_cells(bm, max_cells=blockview.lane_max_cells(bm, 0.0, 100.0))
        assert meta["title"] == lane
        assert (meta["rows"], meta["cols"], meta["run"]) == (grid.rows, grid.cols, grid.run)
        state = cells["state"].to_numpy()
        assert state.dtype == np.int8 and (state == grid.state.ravel()[: len(state)]).all()
        # every block is accounted for, in its state, by the cells
        if grid.run == 1:
            assert (state == cs.classify(bm)).all()
            assert (cells["owner"].to_numpy() == bm.owner).all()
            assert (cells["filled"].to_numpy() == bm.filled).all()
        else:
            counts = cells[[f"n_{name}" for name in cs.STATE_NAMES]].to_numpy()
            assert (counts.sum(axis=0) == cs.state_counts(cs.classify(bm))).all()


def test_every_page_opens_from_the_app(runs):
    at = page("app.py", run="rec.db")
    for path in ("pages/replay.py", "pages/gpu.py", "pages/live.py"):
        at.switch_page(path).run()
        no_exception(at)
        assert not at.error, [e.value for e in at.error]


def test_zoom_narrows_the_address_range(runs):
    at = page("pages/live.py", run="rec.db")
    at.slider(key="live_zoom").set_value((25.0, 50.0)).run()
    no_exception(at)
    meta, _ = canvases(at)[1]
    assert meta["subtitle"].startswith("blocks 128-255 of 512;")


@pytest.mark.parametrize(("start", "stop", "n", "want"), [
    (0, 512, 512, (0.0, 100.0)), (128, 256, 512, (25.0, 50.0)),
    (100, 101, 1000, (10.0, 10.5)),  # one block: at least one 0.5% step
    (3, 7, 1000, (0.0, 1.0)),  # widened outward to whole steps
    (-5, 10**9, 1000, (0.0, 100.0)),  # clamped to the map
])
def test_a_dragged_block_range_becomes_the_zoom_slider_range(start, stop, n, want):
    lo, hi = blockview.zoom_range(start, stop, n)
    assert (lo, hi) == want
    shown = blockview.block_range(SimpleNamespace(num_blocks=n), lo, hi)
    assert shown[0] <= max(0, start) and shown[1] >= min(n, stop)  # every block asked for


def test_history_follows_the_heatmaps_with_series_and_the_failure_feed(runs):
    at = page("app.py", run="rec.db")
    no_exception(at)
    assert any("follow within" in c.value for c in at.caption)  # first run: heatmaps only
    assert len(canvases(at)) == 2 and not figures(at) and not vega_charts(at)
    at.run()  # what the fragment's first tick draws (timers do not fire in AppTest)
    no_exception(at)
    assert len(canvases(at)) == 2  # the heatmaps; the history is Vega-Lite (kvviz.viz.vegalite)
    assert not figures(at)  # no plotly chart left on the Live page
    charts = {spec["title"]["text"]: data for spec, data in vega_charts(at)}
    r = directory.open_run(runs, "rec.db")
    try:
        lanes = r.lanes()
        samples = r.samples()
        every = vt.failure_table(r.events(kinds=["admit_failed"], limit=500))
        fails = every.head(100)
    finally:
        r.close()
    assert samples["t"].max() - samples["t"].min() < 300  # all of it in the 300-s window
    assert len(charts) == 2 * len(lanes) + 4
    for title, _, _, _ in vl.PANELS:
        assert title in charts
    for lane in lanes:
        shares = charts[f"{lane}: used / slack / free"]
        assert np.allclose(shares.groupby("t")["share"].sum(), 1.0)
        hole = charts["Largest hole (slots)"]
        hole = hole[hole["lane"] == lane]
        want = samples[samples["lane"] == lane]
        assert hole["value"].iloc[-1] == want["largest_hole_tokens"].iloc[-1]
        marks = charts[f"{lane}: free total vs largest hole"]
        marks = marks[marks["series"].str.endswith(" failure")]
        assert len(marks) == len(every[every["lane"] == lane])
    feed = at.dataframe[0].value
    assert len(fails) > 0 and len(feed) == len(fails)
    assert feed["seq_id"].tolist() == fails["seq_id"].tolist()
    assert feed["class"].tolist() == fails["class"].tolist()


def test_the_live_page_touches_the_viewer_file(runs):
    at = page("pages/live.py")
    no_exception(at)
    viewer = democollector.collector().viewer
    assert viewer is not None and viewer.exists()
    os.utime(viewer, (0, 0))
    democollector.collector()._touched = 0.0  # let the next touch through at once
    at.run()
    assert viewer.stat().st_mtime > time.time() - 60


def test_other_pages_do_not_keep_the_demo_recording(runs):
    """Replay with the live collector picked reads it, but does not push its idle stop back:
    the demo does not fill runs/ while the user is on other pages."""
    at = page("pages/live.py")
    no_exception(at)
    viewer = democollector.collector().viewer
    os.utime(viewer, (0, 0))
    democollector.collector()._touched = 0.0
    replay = page("pages/replay.py")
    no_exception(replay)
    assert viewer.stat().st_mtime == 0


def test_the_status_box_stops_and_restarts_the_collector(runs):
    at = page("app.py")
    rerun_until(at, lambda a: any("Collector running" in s.value for s in a.success))
    first = democollector.collector().status().recording
    at.button(key="collector_stop").click().run()
    assert democollector.collector().status().state == "stopped"
    assert any("Collector stopped" in w.value for w in at.warning)
    said = " ".join(c.value for c in at.caption).replace("\\", "")  # Markdown escapes
    assert "Last run: workload" in said and "Running:" not in said, said  # not still running
    at.button(key="collector_restart").click().run()
    s = democollector.collector().status()
    assert s.state == "running" and s.recording != first
    assert "Running: workload" in " ".join(c.value for c in at.caption).replace("\\", "")
