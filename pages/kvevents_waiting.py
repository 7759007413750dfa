""""Usage looks low, why are requests waiting?" on the KV events view: the node's scraped gauges
(the recording's own scrapes when `kvviz attach` recorded both, a node recording the user picks,
or the Live run's own counters) beside the event stream, answered by
kvviz.node.kvevents.diagnose.usage_and_waiting. Remote text is shown with st.text only."""
from __future__ import annotations

import time

import streamlit as st

from kvviz.node.kvevents import diagnose
from kvviz.node.kvevents.diagnose import Gauges
from kvviz.runs import directory
from kvviz.store import kv_reader
from kvviz.store.reader import RunReader

WINDOW_S = 30.0  # "recent": the last this many seconds of the stream
SCRAPES_KEPT = 20  # the latest scrapes read for the gauges (flat running count)
LIMITS = ("Events name content blocks by hash only: no request ids, no physical block ids, no "
          "reference counts, and partly filled blocks are never announced. Who is running and "
          "who waits comes from the node's gauges.")


def scraped_gauges(run: str) -> Gauges | None:
    """The node's latest gauges, combined with the stream only when they belong to one node:
    the recording's own scrapes (one `kvviz attach` run), or a node recording the user picks
    here, which the page then says it cannot check."""
    root = directory.runs_dir()
    r = RunReader(directory.resolve_run(root, run))
    try:
        own = r.node_samples(last=SCRAPES_KEPT).to_dict("records")
    finally:
        r.close()
    if own:
        st.caption("Node gauges: this recording's own scrapes (kvviz attach recorded the "
                   "stream and the scrape of one node together).")
        return diagnose.gauges_from_scrapes(own)
    runs = [n for n in directory.node_recordings(root) if n != run]
    if not runs:
        st.caption("No node scrape to compare with: `kvviz attach URL --kv-events ENDPOINT` "
                   "records a node's stream and its /metrics together.")
        return None
    pick = st.selectbox("Compare with a node scrape (only one of the same node)",
                        ["none", *runs], key="kve_gauges", index=0)
    if pick == "none":
        st.caption("This stream was recorded without a scrape, so it is not combined with "
                   "one; pick a node recording above only if it scraped the same node.")
        return None
    st.warning("Combined with the scrape recording you picked: kvviz cannot check that it "
               "scraped the node that published this stream.", icon=":material/link:")
    st.text(f"stream: {run}   scrape: {pick}")
    r = RunReader(directory.resolve_run(root, pick))
    try:
        rows = r.node_samples(last=SCRAPES_KEPT).to_dict("records")
    finally:
        r.close()
    return diagnose.gauges_from_scrapes(rows)


def end_of_stream(state: kv_reader.RunState, timeline: list[tuple]) -> float:
    """The stream's "now" in its own seconds (`state`: kv_reader.run_state's): the wall clock
    for a recording still written, else just past its last batch."""
    created, status, _ = state
    if status == "running" and created is not None:
        return time.time() - float(created)
    return max((float(s) + 1 for _, s, _, _ in timeline), default=0.0)


def waiting_section(model, timeline: list[tuple], end_s: float, gauges: Gauges | None) -> None:
    """"Why are requests waiting?" when the node's latest scrape has some waiting; otherwise
    the cache beside KV usage under its own heading (and no question nobody asked)."""
    waiting = gauges is not None and bool(gauges.num_waiting)
    st.subheader("Usage looks low: why are requests waiting?" if waiting
                 else "Cached blocks and KV usage")
    recent = diagnose.recent_counts(timeline, end_s, WINDOW_S)
    lines = diagnose.usage_and_waiting(model, gauges, recent, WINDOW_S)
    none = ("No request waits in the node's latest scrape." if gauges is not None
            else "No node gauges: whether requests wait is not known.")
    for line in lines or [none]:
        st.text(line)
    st.caption(LIMITS)
