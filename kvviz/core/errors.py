"""Errors that the CLI and UI show as a message (exit 2 / st.error), never as a traceback."""
from __future__ import annotations


class KvvizError(Exception):
    """Base: bad user input (config, trace, recording, upload)."""


class TraceError(KvvizError, ValueError):
    """A malformed trace file; the message names the file, line and field."""


class StoreError(KvvizError):
    """A recording that cannot be read: names the file and what is wrong."""
