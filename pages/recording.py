"""Opening a recording for one script run, and showing a read error instead of a traceback.
Not a page."""
from __future__ import annotations

import json
import sqlite3
import zlib
from collections.abc import Iterator
from contextlib import contextmanager

import streamlit as st

from kvviz.core.errors import KvvizError
from kvviz.node.trust import plain_markdown as md
from kvviz.runs import directory

# What a damaged or odd recording can raise while we read it: shown as st.error, never a trace.
READ_ERRORS = (KvvizError, sqlite3.Error, OSError, ValueError, KeyError, IndexError,
               zlib.error, json.JSONDecodeError)


@contextmanager
def guard(what: str) -> Iterator[None]:
    """Show a read error as st.error with its reason; the rest of the page keeps working.
    `what` is plain text (it names a file of the runs directory): shown escaped, as the reason."""
    try:
        yield
    except READ_ERRORS as exc:
        st.error(f"{md(what)}: {md(exc)}", icon=":material/error:")


@contextmanager
def reader(run: str | None) -> Iterator:
    """Open a recording for one script run; yields None (after st.error) if it cannot."""
    if run is None:
        yield None
        return
    try:
        r = directory.open_run(directory.runs_dir(), run)
    except READ_ERRORS as exc:
        st.error(f"Cannot open recording {md(repr(run))}: {md(exc)}", icon=":material/error:")
        yield None
        return
    try:
        yield r
    finally:
        r.close()


def lanes_of(run: str | None) -> list[str]:
    """The lanes a recording holds; [] if there is none or it cannot be read."""
    if run is None:
        return []
    try:
        r = directory.open_run(directory.runs_dir(), run)
    except READ_ERRORS:
        return []
    try:
        return list(r.lanes())
    except READ_ERRORS:
        return []
    finally:
        r.close()
