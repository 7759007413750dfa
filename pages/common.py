"""Shared Streamlit helpers: the demo collector, the run and lane pickers, error display.

Not a page: app.py registers only the page scripts by name.
"""
from __future__ import annotations

import json
import math
import os
import sqlite3
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NamedTuple

import streamlit as st
from streamlit import config as st_config

from kvviz.config import LaneSpec, lane_caption  # noqa: F401 (pages call common.lane_caption)
from kvviz.errors import KvvizError
from kvviz.node.trust import plain_markdown as md
from kvviz.runs import directory, jobs
from kvviz.viz import blockcanvas, theme
from kvviz.viz import heatmap as vh
from kvviz.viz import timeseries as vt

LIVE = "live collector"
# What a damaged or odd recording can raise while we read it: shown as st.error, never a trace.
READ_ERRORS = (KvvizError, sqlite3.Error, OSError, ValueError, KeyError, IndexError,
               zlib.error, json.JSONDecodeError)
RUN_KEY = "kvviz_run"
LANES_SHOWN = 3  # lanes shown side by side until the user picks (the demo has three)
# Largest upload, MiB (Streamlit's "MB"): the server refuses more (HTTP 413), so it must equal
# server.maxUploadSize in .streamlit/config.toml (tests/torchsnap/test_upload_limit.py checks).
UPLOAD_MAX_MB = 50
WANTED_KEY = "kvviz_wanted_page"
# The Live page's heatmap renderer (kvviz.viz.blockcanvas): registered once per process, as
# this module is imported once. isolate_styles=False: no shadow root, so the page's own
# observers and tests see the canvas; its CSS classes are all prefixed kvmap-.
_BLOCKMAP = st.components.v2.component("kvviz_blockmap", js=blockcanvas.JS,
                                       css=blockcanvas.CSS, isolate_styles=False)


class Selection(NamedTuple):
    run: str | None  # recording file name in the runs directory (None: nothing to show yet)
    live: bool  # the live collector's recording
    lanes: list[str]


@st.cache_resource(show_spinner=False)
def collector() -> jobs.Collector:
    """The one demo collector of this server, shared by every browser session.

    $KVVIZ_COLLECTOR names another module to run (tests use a small fake one).
    """
    return jobs.Collector(directory.runs_dir(),
                          module=os.environ.get("KVVIZ_COLLECTOR", "collectors"))


@contextmanager
def guard(what: str) -> Iterator[None]:
    """Show a read error as st.error with its reason; the rest of the page keeps working."""
    try:
        yield
    except READ_ERRORS as exc:
        st.error(f"{what}: {md(exc)}", icon=":material/error:")


@contextmanager
def reader(run: str | None) -> Iterator:
    """Open a recording for one script run; yields None (after st.error) if it cannot."""
    if run is None:
        yield None
        return
    try:
        r = directory.open_run(directory.runs_dir(), run)
    except READ_ERRORS as exc:
        st.error(f"Cannot open recording {md(repr(run))}: {md(exc)}", icon=":material/error:")
        yield None
        return
    try:
        yield r
    finally:
        r.close()


def _lanes_of(run: str | None) -> list[str]:
    if run is None:
        return []
    try:
        r = directory.open_run(directory.runs_dir(), run)
    except READ_ERRORS:
        return []
    try:
        return list(r.lanes())
    except READ_ERRORS:
        return []
    finally:
        r.close()


def session_id() -> str | None:
    """This browser session's id (who pressed Start, for the other tabs to see)."""
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    ctx = get_script_run_ctx()
    return None if ctx is None else ctx.session_id


def under_apptest() -> bool:
    """True inside streamlit.testing's AppTest. It patches streamlit.config.get_option;
    st.get_option was bound at import and still reads False there."""
    return bool(st_config.get_option("global.appTest"))


def enter_through_app(page: str) -> None:
    """On a fresh server, a link straight to a page runs it without app.py: Streamlit's old
    pages/ mode (its nav lists every file in pages/). Go through app.py once instead; it then
    switches to `page`, and st.navigation holds from then on for every session."""
    try:
        from streamlit.runtime.pages_manager import PagesManager
    except ImportError:  # a Streamlit that moved it: nothing to fix
        return
    # AppTest re-enters the old mode on every run by design; it is not a browser session.
    if PagesManager.uses_pages_directory and not under_apptest():
        st.session_state[WANTED_KEY] = page
        st.switch_page("app.py")


def sidebar(page: str) -> Selection:
    """Run picker (the live collector or a recording under runs/) and lane picker.

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
    if is_live:
        collector().touch_viewer()  # someone looks at the live collector (its idle stop)
    run = collector().status().recording if is_live else choice
    lanes = _lanes_of(run)
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


def headline_metrics(row) -> None:
    """The lane's headline numbers in two rows of four (one HTML grid: redrawn every second)."""
    st.html(theme.headline_html(vt.headline(row)))


def zoom(key: str) -> tuple[float, float]:
    """Address range to show, in % of each lane's capacity (so lanes stay aligned)."""
    return st.slider("Zoom: address range shown (% of each lane's capacity)", 0.0, 100.0,
                     (0.0, 100.0), step=0.5, key=key)


def zoom_range(start: int, stop: int, num_blocks: int) -> tuple[float, float]:
    """Blocks [start, stop) of a map as the zoom slider's (lo, hi) in % of its capacity,
    widened outward to the slider's 0.5% steps so every block asked for stays shown."""
    lo = math.floor(200 * max(0, start) / num_blocks) / 2
    hi = math.ceil(200 * min(num_blocks, stop) / num_blocks) / 2
    return lo, max(hi, lo + 0.5)


def block_range(bm, lo: float, hi: float) -> tuple[int, int]:
    n = bm.num_blocks
    start = min(n - 1, int(lo / 100 * n))
    return start, max(start + 1, int(hi / 100 * n))


def aligned_max_cells(bms: list, lo: float, hi: float) -> int:
    """One cell count for every lane, so a cell covers the same slots side by side."""
    spans = [block_range(bm, lo, hi) for bm in bms]
    return max(1, min(vh.DEFAULT_MAX_CELLS, *(b - a for a, b in spans)))


def blockmap_canvas(data: dict, key: str, on_zoom=None) -> None:
    """A block map on the canvas renderer (data from blockcanvas.canvas_data). The key keeps
    the element mounted across reruns: new data repaints it in place. `on_zoom` (no
    arguments) is called when a range is dragged on it or it is double-clicked; the range is
    then `st.session_state[key].zoom` ({"start", "stop"} in blocks, or {"reset": True})."""
    _BLOCKMAP(data=data, key=key, on_zoom_change=on_zoom or (lambda: None))
