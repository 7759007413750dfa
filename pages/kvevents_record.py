"""The KV events tab's "Record a node's KV-event stream" form and its job's status box (the
one `kvviz events` job of this server). Remote text is escaped."""
from __future__ import annotations

import streamlit as st

from kvviz.core.errors import KvvizError
from kvviz.node.trust import plain_markdown as md
from kvviz.runs import directory, jobs
from pages import widgets


@st.cache_resource(show_spinner=False)
def recorder() -> jobs.EventsJob:
    """The one KV-event recording job of this server, shared by every browser session."""
    return jobs.EventsJob(directory.runs_dir())


def record_controls() -> None:
    rec = recorder()
    with st.expander("Record a node's KV-event stream", expanded=False):
        eps = st.text_input("Endpoints (space-separated)", key="kve_eps",
                            placeholder="tcp://10.0.0.7:5557 tcp://10.0.0.8:5557")
        c1, c2, c3 = st.columns(3)
        ranks = c1.number_input("DP ranks per endpoint", 1, 64, 1, key="kve_ranks")
        replay = c2.text_input("Replay endpoints (optional)", key="kve_replay")
        topic = c3.text_input("Topic", key="kve_topic")
        if st.button("Start recording", key="kve_start", icon=":material/play_arrow:"):
            try:
                st.session_state["kve_run"] = rec.start(eps.split(), int(ranks),
                                                         replay.split() or None, topic).name
            except (KvvizError, ValueError, OSError) as exc:
                st.error(f"Cannot record: {md(exc)}", icon=":material/error:")
        widgets.job_status("KV-event recording", rec, "kve", hide_idle=True)
