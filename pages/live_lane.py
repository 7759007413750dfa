"""The Live page's lanes side by side: each one's name, canvas heatmap (drag a range to
zoom), headline numbers, latest refusals and own KV events. Not a page."""
from __future__ import annotations

from functools import partial

import streamlit as st

from kvviz.viz import blockcanvas as vc
from pages import blockview, kvevents_live

ZOOM_KEY = "live_zoom"
ZOOM_ASKED = "live_zoom_asked"  # (asked, before, fresh): a zoom made on a heatmap (zoom_slider)


def lanes(r, ready: dict, t_now: float, zoom: tuple[float, float]) -> None:
    """The lanes side by side, in three rows: names, heatmaps, then what changes height
    every second (headline numbers, refusals, KV events). A heatmap thus stays where it is
    under a still mouse, its hover box on the same block, and the maps line up."""
    names = list(ready)
    for col, lane in zip(st.columns(len(names)), names):
        with col:
            blockview.lane_head(lane)
    for i, (col, lane) in enumerate(zip(st.columns(len(names)), names)):
        with col:
            lane_map(ready[lane][0], lane, zoom, i)
    for col, lane in zip(st.columns(len(names)), names):
        with col:
            lane_details(r, lane, *ready[lane], t_now)


def lane_map(bm, lane: str, zoom: tuple[float, float], i: int) -> None:
    """The lane's heatmap: a canvas that stays mounted and repaints (kvviz.viz.blockcanvas),
    not a plotly chart (Streamlit re-mounts a changed plotly figure every second in every
    tab). Drag a range on it to zoom."""
    start, stop = blockview.block_range(bm, *zoom)
    max_cells = blockview.lane_max_cells(bm, *zoom)
    key = f"live_heat_{i}"  # the callback holds the block count, not the map
    blockview.blockmap_canvas(vc.canvas_data(bm, start, stop, max_cells=max_cells, title=lane),
                              key=key, on_zoom=partial(zoom_to, key, bm.num_blocks))


def lane_details(r, lane: str, bm, t_map: float, t_now: float) -> None:
    """Under the heatmap: headline numbers, the latest refusals, the lane's KV events. The
    numbers and refusals are of the map's instant (the sample taken with it: one seek), not
    of a sample the collector wrote after the map was read or while maps are thinned."""
    last = r.sample_at(lane, t_map)
    if not last.empty:
        blockview.headline_metrics(last.iloc[-1])
    latest_failures(r, lane, t_map)
    kvevents_live.lane_events(r, lane, bm, None if last.empty else last.iloc[-1], t_now)


def failure_text(ev) -> str:
    """One refused request as the allocator saw it at that moment."""
    need, free, hole = int(ev.need_tokens), int(ev.free_tokens), int(ev.largest_hole_tokens)
    why = {"FRAGMENTATION": "free >= need, but no hole that large",
           "CAPACITY": "not enough free in total",
           "POLICY": "memory would serve; the scheduler refused"}.get(ev.reason, "")
    return (f"**{ev.reason}** at t = {ev.t:.2f} s: seq {int(ev.seq_id)} needs {need:,} "
            f"slots; free {free:,}, largest hole {hole:,} ({why})")


def latest_failures(r, lane: str, t_map: float) -> None:
    """The lane's latest admission failure of each class up to the map's instant, need
    against free and hole (each at its own moment: its time to the step, as the map's)."""
    ev = r.events(lane=lane, kinds=["admit_failed"], limit=200)
    ev = ev[ev["t"] <= t_map]
    if ev.empty:
        st.caption("No admission failure yet.")
        return
    last = ev.drop_duplicates("reason", keep="last").sort_values("t", ascending=False)
    st.caption("Latest refused:  \n" + "  \n".join(failure_text(e) for e in
                                                    last.itertuples()))


def zoom_slider() -> tuple[float, float]:
    """The zoom slider, which a zoom made on a heatmap sets. A tick the browser requested
    before it had that run's slider still carries the range from before the zoom and would
    undo it for a tick: until the browser sends the new range (or the user moves the slider
    elsewhere), the old range is taken for such a stale request and the zoom kept."""
    pending = st.session_state.get(ZOOM_ASKED)
    if pending is not None:
        asked, before, fresh = pending
        now = tuple(st.session_state.get(ZOOM_KEY, blockview.WHOLE))
        if fresh:  # the run of the zoom itself: `now` is what the callback set
            st.session_state[ZOOM_ASKED] = (asked, before, False)
        elif now == before:
            st.session_state[ZOOM_KEY] = asked
        else:  # the browser shows the zoom, or the user moved the slider since
            del st.session_state[ZOOM_ASKED]
    return blockview.zoom(ZOOM_KEY)


def zoom_to(key: str, num_blocks: int) -> None:
    """Callback: a range dragged on a heatmap becomes the zoom slider's range (% of the
    lane's capacity, widened to the slider's 0.5% steps); a double click shows everything."""
    z = st.session_state[key].zoom
    if not isinstance(z, dict):
        return
    asked = blockview.WHOLE if z.get("reset") else blockview.zoom_range(
        int(z["start"]), int(z["stop"]), num_blocks)
    before = tuple(st.session_state.get(ZOOM_KEY, blockview.WHOLE))
    if asked != before:
        st.session_state[ZOOM_ASKED] = (asked, before, True)
    st.session_state[ZOOM_KEY] = asked
