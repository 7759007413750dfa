"""Live: the demo collector's KV cache, redrawn every second, lanes side by side."""
from __future__ import annotations

from functools import partial

import streamlit as st

from kvviz import glossary
from kvviz.config import lane_caption
from kvviz.node.trust import plain_markdown as md
from kvviz.runs import directory
from kvviz.viz import blockcanvas as vc
from kvviz.viz import pressure as vp
from kvviz.viz import theme
from kvviz.viz import timeseries as vt
from kvviz.viz import vegalite as vl
from pages import blockview, democollector, kvevents_live, live_controls, recording, runpicker

WINDOW_S = 300.0  # seconds of history in the time series
PANEL_EVERY_S = 1.0  # heatmaps + headline numbers (why not faster: docs/BENCHMARKS.md)
HISTORY_EVERY_S = 5.0  # the time series and the failure feed change slowly: redraw less often
HISTORY_POINTS = 300  # per lane and series: one per second of the window
HISTORY_SHOWN = "live_history_shown"
ZOOM_KEY = "live_zoom"


def lane_column(col, r, lane: str, bm, t_now: float, zoom: tuple[float, float], max_cells: int,
                i: int) -> None:
    lo, hi = zoom
    with col:
        st.markdown(f"#### {lane}")
        st.caption(lane_caption(lane))
        last = r.samples(lane, since_t=t_now - 5.0)  # the latest sample, without the history
        if not last.empty:
            blockview.headline_metrics(last.iloc[-1])
        latest_failures(r, lane)
        start, stop = blockview.block_range(bm, lo, hi)
        # A canvas that stays mounted and repaints (kvviz.viz.blockcanvas), not a plotly
        # chart: Streamlit re-mounts a changed plotly figure every second in every tab.
        key = f"live_heat_{i}"  # the callback holds the block count, not the map
        blockview.blockmap_canvas(vc.canvas_data(bm, start, stop, max_cells=max_cells,
                                              title=lane), key=key,
                               on_zoom=partial(zoom_to, key, bm.num_blocks))
        kvevents_live.lane_events(r, lane, bm, None if last.empty else last.iloc[-1], t_now)


def failure_text(ev) -> str:
    """One refused request as the allocator saw it at that moment."""
    need, free, hole = int(ev.need_tokens), int(ev.free_tokens), int(ev.largest_hole_tokens)
    why = {"FRAGMENTATION": "free >= need, but no hole that large",
           "CAPACITY": "not enough free in total",
           "POLICY": "memory would serve; the scheduler refused"}.get(ev.reason, "")
    return (f"**{ev.reason}** at t = {ev.t:.1f} s: seq {int(ev.seq_id)} needs {need:,} "
            f"slots; free {free:,}, largest hole {hole:,} ({why})")


def latest_failures(r, lane: str) -> None:
    """The lane's latest admission failure of each class, need against free and hole."""
    ev = r.events(lane=lane, kinds=["admit_failed"], limit=200)
    if ev.empty:
        st.caption("No admission failure yet.")
        return
    last = ev.drop_duplicates("reason", keep="last").sort_values("t", ascending=False)
    st.caption("Latest refused:  \n" + "  \n".join(failure_text(e) for e in
                                                    last.itertuples()))


def zoom_to(key: str, num_blocks: int) -> None:
    """Callback: a range dragged on a heatmap becomes the zoom slider's range (% of the
    lane's capacity, widened to the slider's 0.5% steps); a double click shows everything."""
    z = st.session_state[key].zoom
    if not isinstance(z, dict):
        return
    if z.get("reset"):
        st.session_state[ZOOM_KEY] = (0.0, 100.0)
        return
    lo, hi = blockview.zoom_range(int(z["start"]), int(z["stop"]), num_blocks)
    st.session_state[ZOOM_KEY] = (lo, hi)


def live_run(run: str | None, is_live: bool) -> str | None:
    """The recording to read this tick; the live one follows a restart made in another tab."""
    if is_live:
        run = democollector.collector().status().recording
        if run is None or not (directory.runs_dir() / run).is_file():
            if democollector.collector().status().state == "running":
                st.info("Waiting for the collector to create its recording...")
            return None
    return run


def show(run: str | None, lanes: list[str], is_live: bool, draw_fn) -> None:
    """Open the recording and call draw_fn(reader, lanes it has), errors as st.error."""
    run = live_run(run, is_live)
    with recording.reader(run) as r:
        if r is None:
            return
        with recording.guard(f"Reading {run}"):
            known = r.lanes()
            draw_fn(r, [ln for ln in lanes if ln in known] or known[:runpicker.LANES_SHOWN])


@st.fragment(run_every=PANEL_EVERY_S)
def panel(run: str | None, lanes: list[str], is_live: bool) -> None:
    """Every second: the heatmaps and headline numbers."""
    if is_live:
        democollector.collector().touch_viewer()  # a tab watches: no idle stop (KVVIZ_IDLE_STOP_S)
    show(run, lanes, is_live, draw)


def draw(r, lanes: list[str]) -> None:
    if r.status == "error":
        st.error(f"The collector reported an error: {md(r.status_message)}")
    elif r.state != r.status:  # says running, but its writer stopped committing long ago
        st.warning(f"This recording {r.state}: it still says running, but nothing was "
                   f"written for over {r.stale_after_s:.0f} s (its writer was killed).")
    audit_banner(r)
    if not has_real_sample(r):  # no map yet, or only the one taken before the first step
        st.info("Waiting for the collector's first sample (after its first engine step)...",
                icon=":material/hourglass_empty:")
        return
    maps = {lane: r.latest_blockmap(lane) for lane in lanes}
    ready = {k: v for k, v in maps.items() if v is not None}
    if not ready:
        st.info("Waiting for the first block map from the collector...",
                icon=":material/hourglass_empty:")
        return
    lo, hi = blockview.zoom(ZOOM_KEY)
    max_cells = blockview.aligned_max_cells([bm for bm, _ in ready.values()], lo, hi)
    st.html(theme.legend_html())
    t_now = max(t for _, t in ready.values())
    paused = " (paused)" if is_paused(r) else ""
    st.caption(f"t = {t_now:.1f} s; status: {r.state or 'unknown'}{paused}. In a contiguous "
               "lane, neighbouring sequences alternate between a light and a dark shade.")
    for i, (col, lane) in enumerate(zip(st.columns(len(ready)), ready)):
        lane_column(col, r, lane, ready[lane][0], t_now, (lo, hi), max_cells, i)


def has_real_sample(r) -> bool:
    """A sample the engine produced: recorded after its first step (the collector also
    records the all-free state before it starts, which is no picture of anything)."""
    last = r.last_t()
    if last is None:
        return False
    rows = r.samples(since_t=last - 1.0)  # since_t is exclusive: the last second
    return not rows.empty and int(rows["step"].max()) > 0


def is_paused(r) -> bool:
    """The live collector writing `r` is paused (its control file says so)."""
    coll = democollector.collector()
    s = coll.status()
    return (s.recording == r.path.name and s.state == "running" and coll.control().paused)


def audit_banner(r) -> None:
    """Red when the pool audit (collect --audit) found the pools disagreeing with the map."""
    failed = r.count_events("audit_failed")
    if failed:
        last = r.events(kinds=["audit_failed"], limit=1).iloc[-1]
        st.error(f"Pool audit: {failed} mismatch(es) between the K/V pools and the block "
                 f"map (latest, t = {last.t:.1f} s, lane {md(last.lane)}: {md(last.reason)})")


@st.fragment(run_every=HISTORY_EVERY_S)
def history(run: str | None, lanes: list[str], is_live: bool) -> None:
    """Every few seconds: time series and the admission-failure feed.

    Not on a session's very first run: its five charts and the table (and their JavaScript)
    then compete with the first heatmaps for the browser and delay the first heatmap
    (docs/BENCHMARKS.md, decision log). They follow on the first tick.
    """
    if not st.session_state.get(HISTORY_SHOWN):
        st.session_state[HISTORY_SHOWN] = True
        st.caption(f"Time series and the admission-failure feed follow within "
                   f"{HISTORY_EVERY_S:.0f} s...")
        return
    show(run, lanes, is_live, draw_history)


def draw_history(r, lanes: list[str]) -> None:
    last = r.last_t()  # read only the window: a day-long recording has ~10^6 samples
    samples = r.samples(since_t=None if last is None else last - WINDOW_S)
    if samples.empty or not lanes:
        return
    window = vt.thin(samples[samples["t"] >= samples["t"].max() - WINDOW_S], HISTORY_POINTS)
    st.subheader("Over time", help=f"the last {WINDOW_S:.0f} s, redrawn every "
                 f"{HISTORY_EVERY_S:.0f} s")
    # Vega-Lite, not plotly: a spec that stays the same keeps its chart mounted and only the
    # data is swapped; a changed plotly figure is re-mounted and drawn anew (kvviz.viz.vegalite)
    st.html(vl.shares_legend_html())
    for col, lane in zip(st.columns(len(lanes)), lanes):
        col.vega_lite_chart(*vl.shares_chart(window, lane), theme=None)
        span = vp.span_shares(samples, lane)  # exact averages over the window's steps
        if span is not None:
            col.caption(vp.span_text(span))
    st.caption("The charts show the state at each sample. The averages under them are over the "
               "engine steps of the window: all steps, and memory-pressure steps (the "
               "head-of-line request refused for memory, CAPACITY or FRAGMENTATION, or a "
               "preemption; waiting for the batch limit with memory free does not count).")
    st.html(theme.lanes_legend_html(lanes))
    charts = vl.over_time_charts(window, lanes)
    for row in (charts[:2], charts[2:]):
        for col, chart in zip(st.columns(2), row):
            col.vega_lite_chart(*chart, theme=None)
    st.subheader("Admission failures")
    st.caption(" · ".join(f"**{k}**: {glossary.define(k).removeprefix('admission failure: ')}"
                          for k in theme.FAILURE_MEANING))
    events = r.events(kinds=["admit_failed"], limit=500)
    recent = events[events["t"] >= samples["t"].max() - WINDOW_S]
    st.html(vl.failures_legend_html())
    for col, lane in zip(st.columns(len(lanes)), lanes):
        col.vega_lite_chart(*vl.failures_chart(window, recent, lane), theme=None)
    feed = vt.failure_table(events).head(100)
    st.dataframe(feed, hide_index=True, height=min(300, 38 + 35 * max(1, len(feed))),
                 column_config={"t": st.column_config.NumberColumn("t (s)", format="%.2f"),
                                "seq_id": "seq", "need_tokens": "need (slots)",
                                "free_tokens": "free (slots)",
                                "largest_hole_tokens": "largest hole (slots)",
                                "free_covers_need": "free ≥ need"})


sel = runpicker.sidebar("pages/live.py")
st.title("Live KV cache")
st.caption("Each square is a block of KV memory in address order (a contiguous lane's square "
           "is one slot). A contiguous allocator gives every sequence one range and refuses "
           "with FRAGMENTATION when the free slots add up but no hole is large enough; a paged "
           "one hands out any free block. Words: the glossary in the sidebar.")
if sel.live:
    democollector.collector().ensure_started()
    live_controls.show()
    sel = sel._replace(run=democollector.collector().status().recording)
elif sel.run:
    st.info(f"Showing recording `{sel.run}` (pick the live collector in the sidebar to see "
            "the demo).")
panel(sel.run, sel.lanes, sel.live)
history(sel.run, sel.lanes, sel.live)
