"""What reading a snapshot can refuse, each shown as a message (CLI exit 2, st.error)."""
from __future__ import annotations

from kvviz.core.errors import KvvizError


class UnsafePickleError(KvvizError):
    """The pickle asks for something other than builtin containers and scalars."""


class SnapshotFormatError(KvvizError, ValueError):
    """Not a usable snapshot file: not a pickle, truncated, too large, or wrong structure."""


class PickleLimitError(SnapshotFormatError):
    """The pickle would nest too deeply or cost too much to build."""
