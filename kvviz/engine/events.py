"""Engine events: admitted, admit_failed, preempted, finished, evicted, rejected."""
from __future__ import annotations

from typing import NamedTuple

KINDS = ("admitted", "admit_failed", "preempted", "finished", "evicted", "rejected")


class Event(NamedTuple):
    time_s: float  # simulated time (sim) or wall time since start (real)
    step: int
    lane: str
    kind: str
    seq_id: int  # -1 for lane-wide events (evicted)
    reason: str | None = None  # CAPACITY | FRAGMENTATION | POLICY for admit_failed
    need_tokens: int = 0
    free_tokens: int = 0
    largest_hole_tokens: int = 0
    count: int = 1  # evicted: blocks evicted in this step


class EventLog:
    """Append-only; readers keep a cursor and ask for what came since."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def add(self, ev: Event) -> None:
        self.events.append(ev)

    def since(self, cursor: int) -> tuple[list[Event], int]:
        return self.events[cursor:], len(self.events)

    def __len__(self) -> int:
        return len(self.events)
