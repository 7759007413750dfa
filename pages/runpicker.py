"""The sidebar's run picker (the live collector or a recording under runs/) and lane picker.
Not a page."""
from __future__ import annotations

from typing import NamedTuple

import streamlit as st

from kvviz.runs import directory, jobs
from pages.democollector import collector
from pages.frame import enter_through_app
from pages.recording import lanes_of

LIVE = "live collector"
RUN_KEY = "kvviz_run"
LANES_SHOWN = 4  # lanes shown until the user picks: all a Live collector runs (its max)


class Selection(NamedTuple):
    run: str | None  # recording file name in the runs directory (None: nothing to show yet)
    live: bool  # the live collector's recording
    lanes: list[str]


def sidebar(page: str) -> Selection:
    """Run picker and lane picker.

    Pages that read a recording call this first, with their own path (pages/x.py). The choice
    lives under plain session keys (kvviz_run, kvviz_lanes:<run>), so it survives moving
    between pages.
    """
    enter_through_app(page)
    runs = [r.name for r in directory.list_runs(directory.runs_dir())]
    options = [LIVE, *runs]
    stored = st.session_state.get(RUN_KEY, LIVE)
    choice = st.sidebar.selectbox(
        "Run", options, index=options.index(stored) if stored in options else 0,
        format_func=lambda x: "● live collector" if x == LIVE else x,
        help="The demo collector's recording, or any recording in the runs directory.")
    st.session_state[RUN_KEY] = choice
    is_live = choice == LIVE
    if is_live and page == "pages/live.py":  # Live watches it; elsewhere it idles to a stop
        collector().touch_viewer()
    run = collector().status().recording if is_live else choice
    lanes = lanes_of(run)
    if is_live and not lanes:  # the collector has not written its header yet (first open)
        specs = (collector().config or jobs.DEMO).lanes
        lanes = [s.label for s in specs]
    lane_key = f"kvviz_lanes:{run}"
    shown = lanes[:LANES_SHOWN]
    stored_lanes = [ln for ln in st.session_state.get(lane_key, shown) if ln in lanes]
    picked = st.sidebar.multiselect("Lanes", lanes, default=stored_lanes,
                                    help="Allocators to show side by side.")
    st.session_state[lane_key] = picked
    return Selection(run, is_live, picked or shown)
