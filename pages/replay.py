"""Replay: scrub through a recording; jump to an admission failure from the table."""
from __future__ import annotations

import streamlit as st

from kvviz.viz import heatmap as vh
from kvviz.viz import theme
from kvviz.viz import timeseries as vt
from pages import common

T, PLAYING, APPLIED, TABLE = "replay_t", "replay_playing", "replay_applied", "replay_failures"


def jump_to_selected_failure(table) -> None:
    """A newly selected table row moves the time cursor to that failure (once)."""
    state = st.session_state.get(TABLE) or {}
    rows = list((state.get("selection") or {}).get("rows") or [])
    if rows and rows != st.session_state.get(APPLIED) and rows[0] < len(table):
        st.session_state[T] = float(table["t"].iloc[rows[0]])
        st.session_state[PLAYING] = False
    st.session_state[APPLIED] = rows


def lane_at(col, lane: str, got, rows, t: float, cells: tuple, i: int) -> None:
    with col:
        # lane names come from the recording: shown as text, never Markdown (links, images)
        st.markdown(f"#### {common.md(lane)}")
        st.caption(common.md(common.lane_caption(lane)))
        if not rows.empty:
            common.headline_metrics(rows.iloc[-1])
        if got is None:
            st.info(f"No block map kept at or before {t:.2f} s")
            return
        bm, t_map = got
        lo, hi, max_cells = cells
        start, stop = common.block_range(bm, lo, hi)
        st.plotly_chart(vh.blockmap_figure(bm, start, stop, max_cells=max_cells,
                                           title=f"{lane} @ {t_map:.2f} s"),
                        key=f"replay_heat_{i}", config={"displayModeBar": False},
                        theme=None)  # styled by the builder (kvviz.viz.theme.plain)


def scrub(run: str, lanes: list[str], t0: float, t1: float, step: float) -> None:
    if st.session_state.get(PLAYING):
        nxt = st.session_state.get(T, t0) + step * 10
        st.session_state[PLAYING] = nxt < t1
        st.session_state[T] = min(nxt, t1)
    st.session_state[T] = min(max(float(st.session_state.get(T, t1)), t0), t1)
    t = st.slider("Time (s)", t0, t1, step=step, key=T, format="%.2f")
    lo, hi = common.zoom("replay_zoom")
    with common.reader(run) as r:
        if r is None:
            return
        with common.guard(f"Reading {run}"):
            # Seeks only: the maps and samples at t, 1,000 thinned points per lane for the
            # over-time chart; the cost does not grow with the recording.
            maps = [r.blockmap_at(lane, t) for lane in lanes]
            have = [g[0] for g in maps if g is not None]
            cells = (lo, hi, common.aligned_max_cells(have, lo, hi) if have else 1)
            st.html(theme.legend_html())
            for i, (col, lane) in enumerate(zip(st.columns(len(lanes)), lanes)):
                lane_at(col, lane, maps[i], r.sample_at(lane, t), t, cells, i)
            st.plotly_chart(vt.over_time_figure(r.samples_thinned(1000, lanes), lanes,
                                                mark_t=t),
                            key="replay_time", theme=None)


FEED_MAX = 5000  # failures listed (the latest); a day-long recording can hold 10^5-10^6


def page(r, run: str, lanes: list[str]) -> None:
    span = r.span()
    if span is None:
        st.info("This recording has no samples yet.")
        return
    t0, t1 = span
    if t1 <= t0:
        t1 = t0 + 1e-3
    step = max((t1 - t0) / 1000, 1e-3)
    with st.spinner("Reading admission failures..."):
        total = r.count_events("admit_failed")
        table = vt.failure_table(r.events(kinds=["admit_failed"], limit=FEED_MAX),
                                 newest_first=False)
    table = table[table["lane"].isin(lanes)].reset_index(drop=True)
    jump_to_selected_failure(table)
    c1, c2 = st.columns([1, 5])
    playing = bool(st.session_state.get(PLAYING))
    if c1.button("Pause" if playing else "Play", icon=":material/pause:" if playing
                 else ":material/play_arrow:"):
        st.session_state[PLAYING] = not playing
        if not playing and st.session_state.get(T, t0) >= t1:
            st.session_state[T] = t0
        st.rerun()
    c2.caption(f"{t1 - t0:,.1f} s recorded; status {r.state or 'unknown'}. Play advances "
               f"{step * 10:.2f} s every half second.")
    st.fragment(scrub, run_every=0.5 if playing else None)(run, lanes, t0, t1, step)
    st.subheader(f"Admission failures ({total:,})")
    shown = "" if total <= FEED_MAX else f"The latest {FEED_MAX:,} of all lanes are listed. "
    st.caption(shown + "Select a row to jump to that moment. " + " · ".join(
        f"**{k}**: {v}" for k, v in theme.FAILURE_MEANING.items()))
    st.dataframe(table, key=TABLE, on_select="rerun", selection_mode="single-row",
                 hide_index=True, height=300,
                 column_config={"t": st.column_config.NumberColumn("t (s)", format="%.2f"),
                                "free_covers_need": "free total ≥ need"})


sel = common.sidebar("pages/replay.py")
st.title("Replay")
if not sel.run:
    st.info("No recording yet: start the live collector or put a recording in runs/.")
else:
    with common.reader(sel.run) as rd:
        if rd is not None:
            with common.guard(f"Reading {sel.run}"):
                page(rd, sel.run, sel.lanes or list(rd.lanes())[:2])
