"""The one demo collector of this server, and who is looking at it. Not a page."""
from __future__ import annotations

import streamlit as st

from kvviz.runs import directory, jobs

MODULE = "collectors"  # what the demo collector runs (`python -m collectors`)


@st.cache_resource(show_spinner=False)
def collector() -> jobs.Collector:
    """The one demo collector of this server, shared by every browser session."""
    return jobs.Collector(directory.runs_dir(), module=MODULE)


def session_id() -> str | None:
    """This browser session's id (who pressed Start, for the other tabs to see)."""
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    ctx = get_script_run_ctx()
    return None if ctx is None else ctx.session_id
