"""Where a what-if's request stream and node settings come from: a trace or a recording.

A trace gives the requests; the node's settings are what the caller says (vLLM's defaults).
An attach recording (`kvviz attach --blocks`) gives the node's own requests, its settings
from the server's config, and its own per-step record, which the self-check compares with.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kvviz.core.config import ModelShape
from kvviz.core.safeio import check_input_file
from kvviz.core.workload import Workload
from kvviz.twin import recording
from kvviz.twin.recording import NO_REQUEST_LOG, REQUEST_LOG_TABLES  # noqa: F401 (its home)
from kvviz.twin.runner import Stream
from kvviz.twin.selfcheck import StepRecord
from kvviz.twin.settings import NodeSettings

SQLITE_MAGIC = b"SQLite format 3\x00"
STEP_MS = 1000.0  # a recording's clock: its arrivals are engine steps


@dataclass(frozen=True)
class Source:
    """A what-if's input: the stream, the node's settings, and the node's own record."""

    name: str
    stream: Stream
    settings: NodeSettings
    node_record: StepRecord | None  # None: a trace (no node run to compare)
    trace_info: object | None = None  # kvviz.traces.TraceInfo for a trace


def is_recording(path: str | Path) -> bool:
    """Whether `path` is an SQLite file (a kvviz recording) rather than a trace."""
    try:
        with open(path, "rb") as f:
            return f.read(16) == SQLITE_MAGIC
    except OSError:
        return False


def has_request_log(path: str | Path) -> bool:
    """Whether the recording at `path` holds the plugin's request log (False when unreadable)."""
    from kvviz.store.reader import RunReader

    try:
        reader = RunReader(check_input_file(path, "recording"))
    except Exception:  # noqa: BLE001 - unreadable is "no log here"; read_recording says why
        return False
    try:
        return any(reader.has_table(t) for t in REQUEST_LOG_TABLES)
    finally:
        reader.close()


def read_recording(path: str | Path) -> tuple[Workload, NodeSettings, StepRecord]:
    """(the node's requests, its settings, its per-step record) from an attach recording
    with the plugin's request log (kvviz/twin/recording.py: what is exact, what is named);
    KvvizError naming what is missing or malformed otherwise."""
    return recording.read(check_input_file(path, "recording"))


def from_recording(path: str | Path, model: ModelShape) -> Source:
    """A recording's stream: its arrivals in engine steps, on a clock of 1 s a step (so the
    replay's step numbers are the node's)."""
    w, settings, record = read_recording(path)
    max_seq_len = max(2, int(w.final_len.max()))
    return Source(str(path), Stream(w, model, STEP_MS, max_seq_len), settings, record)


def from_trace(w: Workload, name: str, settings: NodeSettings, model: ModelShape,
               step_ms: float, max_seq_len: int, info: object | None = None) -> Source:
    """A trace (already read and clipped to max_seq_len) at the given settings."""
    return Source(name, Stream(w, model, step_ms, max_seq_len), settings, None, info)
