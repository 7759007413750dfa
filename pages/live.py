"""Live: the demo collector's KV cache, redrawn every second, lanes side by side."""
from __future__ import annotations

import streamlit as st

from kvviz.node.trust import plain_markdown as md
from kvviz.runs import directory
from kvviz.viz import theme
from pages import (
    democollector,
    live_controls,
    live_history,
    live_lane,
    recording,
    runpicker,
)

PANEL_EVERY_S = 1.0  # heatmaps + headline numbers (why not faster: docs/BENCHMARKS.md)
HISTORY_SHOWN = "live_history_shown"


def live_run(run: str | None, is_live: bool) -> str | None:
    """The recording to read this tick; the live one follows a restart made in another tab."""
    if is_live:
        run = democollector.collector().status().recording
        if run is None or not (directory.runs_dir() / run).is_file():
            if democollector.collector().status().state == "running":
                st.info("Waiting for the collector to create its recording...")
            return None
    return run


def show(run: str | None, lanes: list[str], is_live: bool, draw_fn, note: bool = False) -> None:
    """Open the recording and call draw_fn(reader, lanes it has), errors as st.error; `note`:
    say when some of its lanes are not drawn."""
    run = live_run(run, is_live)
    with recording.reader(run) as r:
        if r is None:
            return
        with recording.guard(f"Reading {run}"):
            known = r.lanes()
            drawn = [ln for ln in lanes if ln in known] or known[:runpicker.LANES_SHOWN]
            if note and len(drawn) < len(known):  # never a lane left out without a word
                st.caption(f"{len(drawn)} of the recording's {len(known)} lanes drawn: pick "
                           "others under Lanes in the sidebar.")
            draw_fn(r, drawn)


@st.fragment(run_every=PANEL_EVERY_S)
def panel(run: str | None, lanes: list[str], is_live: bool) -> None:
    """Every second: the heatmaps and headline numbers."""
    if is_live:
        democollector.collector().touch_viewer()  # a tab watches: no idle stop (KVVIZ_IDLE_STOP_S)
    show(run, lanes, is_live, draw, note=True)


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
    lo, hi = live_lane.zoom_slider()
    st.html(theme.legend_html())
    t_now = max(t for _, t in ready.values())
    paused = " (paused)" if is_paused(r) else ""
    st.caption(f"t = {t_now:.2f} s; status: {r.state or 'unknown'}{paused}. In a contiguous "
               "lane, neighbouring sequences alternate between a light and a dark shade.")
    live_lane.lanes(r, ready, t_now, (lo, hi))


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


@st.fragment(run_every=live_history.EVERY_S)
def history(run: str | None, lanes: list[str], is_live: bool) -> None:
    """Every few seconds: time series and the admission-failure feed.

    Not on a session's very first run: its five charts and the table (and their JavaScript)
    then compete with the first heatmaps for the browser and delay the first heatmap
    (docs/BENCHMARKS.md, decision log). They follow on the first tick.
    """
    if not st.session_state.get(HISTORY_SHOWN):
        st.session_state[HISTORY_SHOWN] = True
        st.caption(f"Time series and the admission-failure feed follow within "
                   f"{live_history.EVERY_S:.0f} s...")
        return
    show(run, lanes, is_live, live_history.draw_history)


sel = runpicker.sidebar("pages/live.py")
st.title("Live KV cache")
st.caption("Each square is a cell of KV memory in address order: one block (one slot in a "
           "contiguous lane) or, for a wide range, a run of them; each map's subtitle says how "
           "many, and zooming in re-bins down to one. A contiguous allocator gives every "
           "sequence one range and refuses with FRAGMENTATION when the free slots add up but no "
           "hole is large enough; a paged one hands out any free block. Words: the glossary in "
           "the sidebar.")
if sel.live:
    democollector.collector().ensure_started()
    live_controls.show()
    sel = sel._replace(run=democollector.collector().status().recording)
elif sel.run:
    st.info(f"Showing recording `{sel.run}` (pick the live collector in the sidebar to see "
            "the demo).")
panel(sel.run, sel.lanes, sel.live)
history(sel.run, sel.lanes, sel.live)
