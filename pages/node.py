"""Node: a real serving node's /metrics over time (pages/node_panel.py; started here by
pages/node_scrape.py or pages/node_attach.py), its KV-event streams (pages/kvevents_view.py),
a fleet via Prometheus (pages/node_fleet.py), and a torch CUDA memory snapshot
(pages/node_snapshot.py). This script picks the node recording and lays out the tabs.

Text that comes from outside is never rendered as Markdown: it goes through `md` (escaped)."""
from __future__ import annotations

import streamlit as st

from kvviz.runs import directory
from pages import (
    frame,
    kvevents_view,
    node_attach,
    node_blocks,
    node_fleet,
    node_panel,
    node_scrape,
    node_snapshot,
    recording,
    whatif_panel,
)

RUN_KEY, PENDING = node_scrape.RUN_KEY, node_scrape.PENDING


def node_tab() -> None:
    node_scrape.scrape_controls()
    node_attach.attach_controls()
    runs = directory.node_recordings(directory.runs_dir())
    pending = st.session_state.get(PENDING)
    if pending in runs:
        st.session_state.pop(PENDING)  # on disk now: listed like any other
    elif pending:
        runs = [pending, *runs]
    if pending:  # a start moves the picker to its own recording, not the one shown before
        st.session_state["node_pick"] = pending
    if not runs:
        st.info("No node recording yet: start scraping a node above, or record one with "
                "`kvviz scrape URL --out runs/node.db`.", icon=":material/info:")
        return
    stored = st.session_state.get(RUN_KEY)
    run = st.selectbox("Node recording", runs, key="node_pick",
                       index=runs.index(stored) if stored in runs else 0)
    st.session_state[RUN_KEY] = run
    if not (directory.runs_dir() / run).exists():  # a job just started: its file comes next
        node_panel.node_panel(run)  # waits for it, then redraws the whole page
        return
    node_blocks.panel(run)  # the vLLM plugin's real block pool, when the recording has it
    # a kvviz attach recording: scrapes and events side by side, from one read
    node_panel.node_panel(run, node_attach.events_panel if node_attach.has_events(run) else None)
    with recording.guard(f"Reading {run} for What if?"):
        whatif_panel.node_panel(directory.resolve_run(directory.runs_dir(), run), "node:whatif")


frame.enter_through_app("pages/node.py")
st.title("Serving node")
st.caption("A vLLM/SGLang node through its Prometheus /metrics and its KV-event streams, a "
           "fleet through a Prometheus server, and PyTorch's caching allocator through a "
           "memory snapshot.")
node, kv, fleet, snapshot = st.tabs(["Node", "KV events", "Fleet", "PyTorch memory snapshot"])
with node:
    node_tab()
with kv:
    kvevents_view.render()
with fleet:
    node_fleet.fleet_tab()
with snapshot:
    node_snapshot.snapshot_tab()
