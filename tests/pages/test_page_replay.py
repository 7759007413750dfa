"""Replay: the heatmaps at the cursor's moment; a failure row moves the cursor."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import streamlit as st

from kvviz.runs import directory
from kvviz.viz import failmark as fm
from kvviz.viz import heatmap as vh
from kvviz.viz import timeseries as vt
from pages import blockview
from tests.pages.pagehelpers import decode, heatmaps, no_exception, page, tile_grids
from tests.pages.recordings import write_recording


def maps_at(runs, t: float):
    r = directory.open_run(runs, "rec.db")
    try:
        return [r.blockmap_at(lane, t) for lane in r.lanes()]
    finally:
        r.close()


def check_heatmaps_match(at, runs, t: float) -> None:
    got = maps_at(runs, t)
    specs = heatmaps(at)
    assert len(specs) == 2
    for spec, (bm, t_map) in zip(specs, got):
        z = decode(spec["data"][0]["z"])
        assert z.dtype == np.int8
        cells = blockview.lane_max_cells(bm, 0.0, 100.0, cap=blockview.PLOTLY_MAX_CELLS)
        assert (z == vh.blockmap_cells(bm, max_cells=cells).state).all()
        assert f"@ {t_map:.2f} s" in spec["layout"]["title"]["text"]


def test_replay_opens_at_the_end_with_heatmaps_table_and_slider(runs):
    at = page("pages/replay.py", run="rec.db")
    no_exception(at)
    t = at.slider(key="replay_t").value
    assert t == at.slider(key="replay_t").max
    assert len(at.dataframe) == 1 and len(at.dataframe[0].value) > 0
    check_heatmaps_match(at, runs, t)


def test_scrubbing_redraws_the_maps_of_that_moment(runs):
    at = page("pages/replay.py", run="rec.db")
    t_mid = round(at.slider(key="replay_t").max / 3, 2)
    at.slider(key="replay_t").set_value(t_mid).run()
    no_exception(at)
    check_heatmaps_match(at, runs, at.slider(key="replay_t").value)


def test_selecting_a_failure_jumps_to_its_moment(runs):
    at = page("pages/replay.py", run="rec.db")
    table = at.dataframe[0].value
    row = len(table) // 2
    at.session_state["replay_failures"] = {"selection": {"rows": [row], "columns": [],
                                                         "cells": []}}
    at.run()
    no_exception(at)
    t = at.slider(key="replay_t").value
    assert abs(t - float(table["time (s)"].iloc[row])) < 1e-9
    check_heatmaps_match(at, runs, t)
    at.slider(key="replay_t").set_value(0.5).run()  # the selection does not pin the cursor
    assert abs(at.slider(key="replay_t").value - 0.5) < 1e-9


def _select(at, row: int) -> None:
    at.session_state["replay_failures"] = {"selection": {"rows": [row], "columns": [],
                                                         "cells": []}}
    at.run()
    no_exception(at)


def test_the_failure_table_has_human_headers_and_one_checkbox_column(runs):
    at = page("pages/replay.py", run="rec.db")
    table = at.dataframe[0].value
    assert list(table.columns) == ["time (s)", "lane", "request", "class", "need",
                                   "free in total", "largest hole", "free ≥ need"]
    assert not any(table[c].dtype == bool for c in table.columns)  # only the selection box
    assert set(table["free ≥ need"]) <= {"yes", "no"}
    cfg = json.loads(at.dataframe[0].proto.columns)
    widths = {k: v["width"] for k, v in cfg.items() if not v.get("hidden")}
    assert set(widths) == set(table.columns) and sum(widths.values()) <= 860  # fits the page
    for col in table.columns:  # every cell and header fits its column (~8 px a character)
        longest = max(len(col), *(len(f"{v:.2f}" if col == "time (s)" else str(v))
                                  for v in table[col]))
        assert widths[col] >= 7 * longest + 12, col


FRAG_LANES = ("contiguous:first-fit:exact", "paged:16")


@pytest.fixture(scope="module")
def frag_recording(tmp_path_factory) -> Path:
    """Exact-size ranges in 8,192 slots: FRAGMENTATION failures, a block map every step."""
    return write_recording(tmp_path_factory.mktemp("frag") / "rec.db", steps=400, every=1,
                           capacity=8192, lanes=FRAG_LANES)


@pytest.fixture
def frag_runs(tmp_path, monkeypatch, frag_recording) -> Path:
    monkeypatch.setenv("KVVIZ_RUNS_DIR", str(tmp_path))
    shutil.copy(frag_recording, tmp_path / "rec.db")
    st.cache_resource.clear()
    yield tmp_path
    st.cache_resource.clear()


def test_jump_to_failure_marks_the_refused_request_on_its_lane(frag_runs):
    at = page("pages/replay.py", run="rec.db")
    table = at.dataframe[0].value
    row = int(np.flatnonzero(table["class"].to_numpy() == "FRAGMENTATION")[0])
    _select(at, row)
    f = table.iloc[row]
    warn = at.warning[0].value
    assert warn.startswith(f"Request {f['request']} refused at {f['time (s)']:.2f} s, "
                           f"FRAGMENTATION: needs {f['need']:,} slots; "
                           f"{f['free in total']:,} free in total, largest hole "
                           f"{f['largest hole']:,}.")
    assert "the hole was too small" in warn
    i = FRAG_LANES.index(f["lane"])
    spec = heatmaps(at)[i]
    names = [sh.get("name") for sh in spec["layout"].get("shapes", [])]
    assert "largest hole" in names and "need" in names
    assert not heatmaps(at)[1 - i]["layout"].get("shapes")  # only the failure's own lane
    # the outlined hole is the largest hole the request met, and the need runs past it
    bm, _ = maps_at(frag_runs, float(f["time (s)"]))[i]
    mark = fm.mark_for(bm, fm.Failure("FRAGMENTATION", int(f["need"]), int(f["free in total"]),
                                      int(f["largest hole"]), 0, 0.0))
    assert mark.hole[1] - mark.hole[0] == f["largest hole"]
    assert mark.need[1] - mark.need[0] == f["need"] > mark.hole[1] - mark.hole[0]
    at.slider(key="replay_t").set_value(0.5).run()  # moving away drops the mark
    assert not at.warning and not any(h["layout"].get("shapes") for h in heatmaps(at))


def test_play_advances_the_cursor(runs):
    at = page("pages/replay.py", run="rec.db")
    at.button[0].click().run()  # at the end, Play starts from the beginning
    no_exception(at)
    t0 = at.slider(key="replay_t").value
    at.run()
    assert at.slider(key="replay_t").value > t0
    assert at.button[0].label == "Pause"



def test_without_a_live_recording_it_points_at_the_recordings_there_are(runs):
    at = page("pages/replay.py")  # the sidebar's default: the live collector, not started
    no_exception(at)
    assert at.session_state["kvviz_run"] == "live collector"
    assert "Pick one of the 1 recordings under **Run** in the sidebar" in at.info[0].value


def test_pause_stops_time_where_the_user_saw_it(runs):
    at = page("pages/replay.py", run="rec.db")
    at.button(key="replay_play").click().run()  # at the end: Play starts from the beginning
    at.run()  # one tick of play
    seen = at.slider(key="replay_t").value
    at.button(key="replay_play").click().run()
    no_exception(at)
    assert at.button(key="replay_play").label == "Play"
    assert at.slider(key="replay_t").value == seen
    at.run()  # and it stays there
    assert at.slider(key="replay_t").value == seen


def test_a_lanes_numbers_are_those_of_its_maps_instant(tmp_path, monkeypatch):
    """Samples every 5 steps, maps every 50: between two maps the tiles under a map read the
    sample taken with that map, not the later one at the cursor."""
    from kvviz.store.writer import RunWriter
    from tests.pages.recordings import make_sim, meta_for, sample
    monkeypatch.setenv("KVVIZ_RUNS_DIR", str(tmp_path))
    st.cache_resource.clear()
    sim = make_sim(capacity=8192)
    w = RunWriter(tmp_path / "rec.db", meta_for(sim))
    prev: dict[str, int] = {}
    for _ in range(300):
        sim.step()
        if sim.step_no % 5 == 0:
            sample(w, sim, sim.time_s, prev, 0.1, with_maps=sim.step_no % 50 == 0)
            w.commit()
    w.close("finished")
    r = directory.open_run(tmp_path, "rec.db")
    try:
        lane = r.lanes()[0]
        t_map = r.blockmap_at(lane, 4.9)[1]  # the map of step 200 (t = 4.0 s at 20 ms a step)
        at_map = r.sample_at(lane, t_map).iloc[-1]
        at_cursor = r.sample_at(lane, 4.9).iloc[-1]
    finally:
        r.close()
    want, later = ({h.label: h.value for h in vt.headline(x)} for x in (at_map, at_cursor))
    assert at_cursor["t"] > t_map and want != later  # the two instants' tiles differ
    at = page("pages/replay.py", run="rec.db")
    at.slider(key="replay_t").set_value(4.9).run()
    no_exception(at)
    rows = tile_grids(at)
    assert len(rows) == 2 and rows[0] == want
