"""Replay: scrub through a recording; jump to an admission failure from the table."""
from __future__ import annotations

import streamlit as st

from kvviz.core.config import lane_caption
from kvviz.node.trust import plain_markdown as md
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


def shown_table(table):
    """The failure table with human headers; the yes/no column as text, so that the only
    checkbox column is the row selection."""
    out = table.copy()
    out["free_covers_need"] = out["free_covers_need"].map({True: "yes", False: "no"})
    return out.rename(columns=TABLE_HEADERS)


def lane_at(col, lane: str, got, rows, t: float, cells: tuple, i: int,
            failure: fm.Failure | None = None) -> None:
    with col:
        # lane names come from the recording: shown as text, never Markdown (links, images)
        st.markdown(f"#### {md(lane)}")
        st.caption(md(lane_caption(lane)))
        if not rows.empty:
            blockview.headline_metrics(rows.iloc[-1])
        if got is None:
            st.info(f"No block map kept at or before {t:.2f} s")
            return
        bm, t_map = got
        lo, hi, max_cells = cells
        start, stop = blockview.block_range(bm, lo, hi)
        fig = vh.blockmap_figure(bm, start, stop, max_cells=max_cells,
                                 title=f"{lane} @ {t_map:.2f} s")
        if failure is not None:
            mark = fm.mark_failure(fig, bm, failure, start, stop, max_cells=max_cells)
            late = "" if abs(t_map - failure.t) < 1e-9 else (
                f" The map shown was sampled at {t_map:.2f} s, not at the failure: its holes "
                "may differ from the ones the request met.")
            st.warning(mark.text + late, icon=":material/block:")
        st.plotly_chart(fig, key=f"replay_heat_{i}", config={"displayModeBar": False},
                        theme=None)  # styled by the builder (kvviz.viz.theme.plain)


def scrub(run: str, lanes: list[str], t0: float, t1: float, step: float) -> None:
    if st.session_state.get(PLAYING):
        nxt = st.session_state.get(T, t0) + step * 10
        st.session_state[PLAYING] = nxt < t1
        st.session_state[T] = min(nxt, t1)
    st.session_state[T] = min(max(float(st.session_state.get(T, t1)), t0), t1)
    t = st.slider("Time (s)", t0, t1, step=step, key=T, format="%.2f")
    lo, hi = blockview.zoom("replay_zoom")
    with recording.reader(run) as r:
        if r is None:
            return
        with recording.guard(f"Reading {run}"):
            # Seeks only: the maps and samples at t, 1,000 thinned points per lane for the
            # over-time chart; the cost does not grow with the recording.
            maps = [r.blockmap_at(lane, t) for lane in lanes]
            have = [g[0] for g in maps if g is not None]
            cells = (lo, hi, blockview.aligned_max_cells(have, lo, hi) if have else 1)
            st.html(theme.legend_html())
            for i, (col, lane) in enumerate(zip(st.columns(len(lanes)), lanes)):
                lane_at(col, lane, maps[i], r.sample_at(lane, t), t, cells, i,
                        picked_failure(lane, t, (t0, t1), step))
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
    st.caption(shown + "Sizes in slots. Select a row to jump to that moment and mark the "
               "refused request on its lane's map. " + " · ".join(
                   f"**{k}**: {v}" for k, v in theme.FAILURE_MEANING.items()))
    cc = st.column_config
    st.dataframe(shown_table(table), key=TABLE, on_select="rerun", selection_mode="single-row",
                 hide_index=True, height=300, width="stretch",
                 column_config={k: cc.NumberColumn(format="%.2f", width=w) if k == "time (s)"
                                else cc.Column(width=w) for k, w in WIDTHS.items()})


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
