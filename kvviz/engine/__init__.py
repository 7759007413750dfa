"""Continuous batching over lanes. Sim mode needs numpy and numba; real mode plugs a KVExecutor.

`Lane` and `Simulation` load the compiled rule (numba, ~50 MB) on first use, not when a
module of this package is imported: `kvviz events` reads the event log's codes
(kvviz.engine.eventlog) and must stay small (its memory guard's limits count on a bare
interpreter's ~60 MB)."""
from __future__ import annotations

from kvviz.engine.eventlog import Event, EventLog

__all__ = ["Event", "EventLog", "Lane", "Simulation"]


def __getattr__(name: str):
    if name == "Lane":
        from kvviz.engine.lane import Lane
        return Lane
    if name == "Simulation":
        from kvviz.engine.simulation import Simulation
        return Simulation
    raise AttributeError(f"module 'kvviz.engine' has no attribute {name!r}")
