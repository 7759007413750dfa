"""The app frame: every page runs inside app.py (navigation, Host check, sidebar). Not a page.

On a fresh server Streamlit runs a direct link to a page (/compare) without app.py when a
pages/ folder sits beside it (its first-generation multipage mode, which lists every file in
pages/). app.py marks each session it framed; a page that finds no mark switches to app.py once,
which then switches back to the page through st.navigation and its Host check.
"""
from __future__ import annotations

import streamlit as st

FRAMED_KEY = "kvviz_framed"  # set by app.py once it has run in this session
WANTED_KEY = "kvviz_wanted_page"  # the page a direct link asked for, until app.py switches


def mark_framed() -> str | None:
    """Called by app.py after its Host check: returns the page a direct link asked for."""
    st.session_state[FRAMED_KEY] = True
    return st.session_state.pop(WANTED_KEY, None)


def enter_through_app(page: str) -> None:
    """First line of every page script (`page`: its path, pages/x.py)."""
    if not st.session_state.get(FRAMED_KEY):
        st.session_state[WANTED_KEY] = page
        st.switch_page("app.py")
