"""Replay: the heatmaps at the cursor's moment; a failure row moves the cursor."""
from __future__ import annotations

import numpy as np
from pagehelpers import decode, heatmaps, no_exception, page
from streamlit.testing.v1 import AppTest

from kvviz.runs import directory
from kvviz.viz import heatmap as vh
from pages import common


def maps_at(runs, t: float):
    r = directory.open_run(runs, "rec.db")
    try:
        return [r.blockmap_at(lane, t) for lane in r.lanes()]
    finally:
        r.close()


def check_heatmaps_match(at, runs, t: float) -> None:
    got = maps_at(runs, t)
    bms = [g[0] for g in got]
    max_cells = common.aligned_max_cells(bms, 0.0, 100.0)
    specs = heatmaps(at)
    assert len(specs) == 2
    for spec, (bm, t_map) in zip(specs, got):
        z = decode(spec["data"][0]["z"])
        assert z.dtype == np.int8
        assert (z == vh.blockmap_cells(bm, max_cells=max_cells).state).all()
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
    assert abs(t - float(table["t"].iloc[row])) < 1e-9
    check_heatmaps_match(at, runs, t)
    at.slider(key="replay_t").set_value(0.5).run()  # the selection does not pin the cursor
    assert abs(at.slider(key="replay_t").value - 0.5) < 1e-9


def test_play_advances_the_cursor(runs):
    at = page("pages/replay.py", run="rec.db")
    at.button[0].click().run()  # at the end, Play starts from the beginning
    no_exception(at)
    t0 = at.slider(key="replay_t").value
    at.run()
    assert at.slider(key="replay_t").value > t0
    assert at.button[0].label == "Pause"



def test_pages_know_when_they_run_under_apptest(tmp_path):
    # The bounce through app.py is for browser sessions; under AppTest it would lose widget
    # values on every rerun, so the check must see AppTest's patched option.
    script = tmp_path / "probe.py"
    script.write_text("import streamlit as st\nfrom pages import common\n"
                      "st.write(f'apptest={common.under_apptest()}')\n")
    at = AppTest.from_file(str(script)).run()
    no_exception(at)
    assert at.markdown[0].value == "apptest=True"
    assert not common.under_apptest()  # and outside it, False
