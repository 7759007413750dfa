""""Usage looks low, why are requests waiting?" on the KV events view: the node's scraped gauges
(a node recording picked here, or the Live run's own counters) beside the event stream, answered
by kvviz.node.kvevents.diagnose.usage_and_waiting. Remote text is shown with st.text only."""
from __future__ import annotations

import time

import streamlit as st

from kvviz.node.kvevents import diagnose
from kvviz.node.kvevents.diagnose import Gauges
from kvviz.runs import directory
from kvviz.store.reader import RunReader

WINDOW_S = 30.0  # "recent": the last this many seconds of the stream
SCRAPES_KEPT = 20  # the latest scrapes read for the gauges (flat running count)
NODE_RUN_KEY = "kvviz_node_run"  # the Node tab's picked node recording (pages/node.py)
LIMITS = ("Events name content blocks by hash only: no request ids, no physical block ids, no "
          "reference counts, and partly filled blocks are never announced. Who is running and "
          "who waits comes from the node's gauges.")


def scraped_gauges() -> Gauges | None:
    """A node recording to compare with (the Node tab's by default); its latest gauges."""
    runs = directory.node_recordings(directory.runs_dir())
    if not runs:
        st.caption("No node scrape recorded: start one in the Node tab to compare the stream "
                   "with the node's usage, running and waiting requests.")
        return None
    here = st.session_state.get(NODE_RUN_KEY)
    options = ["none", *runs]
    pick = st.selectbox("Node scrape to compare with", options, key="kve_gauges",
                        index=options.index(here) if here in runs else 1)
    if pick == "none":
        return None
    r = RunReader(directory.resolve_run(directory.runs_dir(), pick))
    try:
        rows = r.node_samples(last=SCRAPES_KEPT).to_dict("records")
    finally:
        r.close()
    return diagnose.gauges_from_scrapes(rows)


def end_of_stream(conn, timeline: list[tuple]) -> float:
    """The stream's "now" in its own seconds: the wall clock for a recording still written,
    else just past its last batch."""
    created, status = conn.execute("SELECT created_unix, status FROM run").fetchone()
    if status == "running" and created is not None:
        return time.time() - float(created)
    return max((float(s) + 1 for _, s, _, _ in timeline), default=0.0)


def waiting_section(model, timeline: list[tuple], end_s: float, gauges: Gauges | None) -> None:
    st.subheader("Usage looks low: why are requests waiting?")
    recent = diagnose.recent_counts(timeline, end_s, WINDOW_S)
    lines = diagnose.usage_and_waiting(model, gauges, recent, WINDOW_S)
    for line in lines or ["Nothing to explain: no request waits and no heavy recompute."]:
        st.text(line)
    st.caption(LIMITS)
