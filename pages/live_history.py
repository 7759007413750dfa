"""The Live page's history: shares, usage and failures over the last minutes, and the
admission-failure feed (Vega-Lite: the charts stay mounted, their data is swapped). Not a page."""
from __future__ import annotations

import streamlit as st

from kvviz.viz import glossary, theme
from kvviz.viz import pressure as vp
from kvviz.viz import timeseries as vt
from kvviz.viz import vegalite as vl

WINDOW_S = 300.0  # seconds of history in the time series
EVERY_S = 5.0  # the time series and the failure feed change slowly: redraw less often
POINTS = 300  # per lane and series: one per second of the window


def draw_history(r, lanes: list[str]) -> None:
    last = r.last_t()  # read only the window: a day-long recording has ~10^6 samples
    samples = r.samples(since_t=None if last is None else last - WINDOW_S)
    if samples.empty or not lanes:
        return
    window = vt.thin(samples[samples["t"] >= samples["t"].max() - WINDOW_S], POINTS)
    st.subheader("Over time", help=f"the last {WINDOW_S:.0f} s, redrawn every "
                 f"{EVERY_S:.0f} s")
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
