"""The one demo collector of this server, and who is looking at it. Not a page."""
from __future__ import annotations

import uuid

import streamlit as st

from kvviz.runs import directory, jobs

MODULE = "collectors"  # what the demo collector runs (`python -m collectors`)
SESSION_KEY = "kvviz_session_id"


@st.cache_resource(show_spinner=False)
def collector() -> jobs.Collector:
    """The one demo collector of this server, shared by every browser session."""
    return jobs.Collector(directory.runs_dir(), module=MODULE)


def session_id() -> str:
    """This browser session's id (who pressed Start, for the other tabs to see): drawn once per
    session and kept in its session state."""
    return st.session_state.setdefault(SESSION_KEY, uuid.uuid4().hex)
