"""Replay: scrub through a recording; jump to an admission failure from the table."""
from __future__ import annotations

import streamlit as st

from kvviz.runs import directory
from kvviz.viz import failmark as fm
from kvviz.viz import heatmap as vh
from kvviz.viz import theme
from kvviz.viz import timeseries as vt
from pages import blockview, recording, runpicker

T, PLAYING, APPLIED, TABLE = "replay_t", "replay_playing", "replay_applied", "replay_failures"
PICKED = "replay_picked"  # (lane, Failure) of the selected row, marked on its lane's map


def jump_to_selected_failure(table) -> None:
    """A newly selected table row moves the time cursor to that failure (once) and marks the
    refused request on its lane's heatmap while the cursor stays at that moment."""
    state = st.session_state.get(TABLE) or {}
    rows = list((state.get("selection") or {}).get("rows") or [])
    if rows and rows != st.session_state.get(APPLIED) and rows[0] < len(table):
        row = table.iloc[rows[0]]
        st.session_state[T] = float(row["t"])
        st.session_state[PLAYING] = False
        st.session_state[PICKED] = (str(row["lane"]), fm.Failure(
            str(row["class"]), int(row["need_tokens"]), int(row["free_tokens"]),
            int(row["largest_hole_tokens"]), int(row["seq_id"]), float(row["t"])))
    if not rows:
        st.session_state.pop(PICKED, None)
    st.session_state[APPLIED] = rows


def picked_failure(lane: str, t: float, span: tuple[float, float],
                   step: float) -> fm.Failure | None:
    """The selected failure, if it is on `lane` and the cursor is still at its moment (as
    the slider holds it: clamped to the recording's span)."""
    got = st.session_state.get(PICKED)
    if got is None or got[0] != lane:
        return None
    at = min(max(got[1].t, span[0]), span[1])
    return got[1] if abs(at - t) <= step / 2 else None


TABLE_HEADERS = {"t": "time (s)", "lane": "lane", "seq_id": "request", "class": "class",
                 "need_tokens": "need", "free_tokens": "free in total",
                 "largest_hole_tokens": "largest hole", "free_covers_need": "free ≥ need"}
WIDTHS = {"time (s)": 70, "lane": 210, "request": 70, "class": 125, "need": 70,
          "free in total": 110, "largest hole": 100, "free ≥ need": 90}  # px: nothing cut off


def lane_width(table) -> int:
    """px for the lane column: its longest name whole (about 8 px a character at the
    table's font, and the cell's padding)."""
    longest = max((len(str(x)) for x in table["lane"]), default=0) if len(table) else 0
    return max(WIDTHS["lane"], 8 * longest + 28)


def shown_table(table):
    """The failure table with human headers; the yes/no column as text, so that the only
    checkbox column is the row selection."""
    out = table.copy()
    out["free_covers_need"] = out["free_covers_need"].map({True: "yes", False: "no"})
    return out.rename(columns=TABLE_HEADERS)


def lane_map(lane: str, got, t: float, zoom: tuple[float, float], i: int,
             failure: fm.Failure | None) -> str | None:
    """The lane's map at or before t; returns the failure's mark text (drawn under the maps,
    so that the maps stay side by side at one height)."""
    if got is None:
        st.info(f"No block map kept at or before {t:.2f} s")
        return None
    bm, t_map = got
    start, stop = blockview.block_range(bm, *zoom)
    max_cells = blockview.lane_max_cells(bm, *zoom, cap=blockview.PLOTLY_MAX_CELLS)
    fig = vh.blockmap_figure(bm, start, stop, max_cells=max_cells,
                             title=f"{lane} @ {t_map:.2f} s")
    text = None
    if failure is not None:
        mark = fm.mark_failure(fig, bm, failure, start, stop, max_cells=max_cells)
        late = "" if abs(t_map - failure.t) < 1e-9 else (
            f" The map and the numbers of this lane are those sampled at {t_map:.2f} s, "
            "before the failure: its holes may differ from the ones the request met.")
        text = mark.text + late
    st.plotly_chart(fig, key=f"replay_heat_{i}", config={"displayModeBar": False},
                    theme=None)  # styled by the builder (kvviz.viz.theme.plain)
    return text


def lanes_at(r, lanes: list[str], t: float, zoom: tuple[float, float], failures: list) -> None:
    """The lanes side by side in three rows (names, maps, numbers): the maps line up, and a
    lane's numbers are of the instant its map was sampled (one instant per lane)."""
    maps = [r.blockmap_at(lane, t) for lane in lanes]
    for col, lane in zip(st.columns(len(lanes)), lanes):
        with col:
            blockview.lane_head(lane)
    marks = []
    for i, (col, lane) in enumerate(zip(st.columns(len(lanes)), lanes)):
        with col:
            marks.append(lane_map(lane, maps[i], t, zoom, i, failures[i]))
    for col, lane, got, mark in zip(st.columns(len(lanes)), lanes, maps, marks):
        with col:
            rows = r.sample_at(lane, t if got is None else got[1])
            if not rows.empty:
                blockview.headline_metrics(rows.iloc[-1])
            if mark:
                st.warning(mark, icon=":material/block:")


def scrub(run: str, lanes: list[str], t0: float, t1: float, step: float) -> None:
    playing = bool(st.session_state.get(PLAYING))
    c1, c2 = st.columns([1, 5])
    if c1.button("Pause" if playing else "Play", key="replay_play",
                 icon=":material/pause:" if playing else ":material/play_arrow:"):
        # handled before any advance: a Pause stops time where the user saw it
        st.session_state[PLAYING] = not playing
        if not playing and st.session_state.get(T, t0) >= t1:
            st.session_state[T] = t0
        st.rerun(scope="app")
    c2.caption(f"{t1 - t0:,.1f} s recorded. Play advances {step * 10:.2f} s every half "
               "second.")
    if playing:
        nxt = st.session_state.get(T, t0) + step * 10
        st.session_state[PLAYING] = nxt < t1
        st.session_state[T] = min(nxt, t1)
    st.session_state[T] = min(max(float(st.session_state.get(T, t1)), t0), t1)
    t = st.slider("Time (s)", t0, t1, step=step, key=T, format="%.2f")
    zoom = blockview.zoom("replay_zoom")
    with recording.reader(run) as r:
        if r is None:
            return
        with recording.guard(f"Reading {run}"):
            # Seeks only: the maps and samples at t, 1,000 thinned points per lane for the
            # over-time chart; the cost does not grow with the recording.
            st.html(theme.legend_html())
            lanes_at(r, lanes, t, zoom,
                     [picked_failure(lane, t, (t0, t1), step) for lane in lanes])
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
    st.caption(f"Status {r.state or 'unknown'}.")
    playing = bool(st.session_state.get(PLAYING))
    st.fragment(scrub, run_every=0.5 if playing else None)(run, lanes, t0, t1, step)
    st.subheader(f"Admission failures ({total:,})")
    shown = "" if total <= FEED_MAX else f"The latest {FEED_MAX:,} of all lanes are listed. "
    st.caption(shown + "Sizes in slots. Select a row to jump to that moment and mark the "
               "refused request on its lane's map. " + " · ".join(
                   f"**{k}**: {v}" for k, v in theme.FAILURE_MEANING.items()))
    cc = st.column_config
    widths = {**WIDTHS, "lane": lane_width(table)}
    st.dataframe(shown_table(table), key=TABLE, on_select="rerun", selection_mode="single-row",
                 hide_index=True, height=300, width="stretch",
                 column_config={k: cc.NumberColumn(format="%.2f", width=w) if k == "time (s)"
                                else cc.Column(width=w) for k, w in widths.items()})


sel = runpicker.sidebar("pages/replay.py")
st.title("Replay")
if not sel.run:
    others = directory.list_runs(directory.runs_dir())
    st.info(f"The live collector has no recording yet. Pick one of the {len(others)} "
            "recordings under **Run** in the sidebar." if others else
            "No recording yet: start the live collector or put a recording in runs/.")
else:
    with recording.reader(sel.run) as rd:
        if rd is not None:
            with recording.guard(f"Reading {sel.run}"):
                page(rd, sel.run, sel.lanes or list(rd.lanes())[:2])
