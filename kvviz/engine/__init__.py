"""Continuous batching over lanes. Sim mode needs numpy only; real mode plugs a KVExecutor."""
from kvviz.engine.eventlog import Event, EventLog
from kvviz.engine.lane import Lane
from kvviz.engine.simulation import Simulation

__all__ = ["Event", "EventLog", "Lane", "Simulation"]
