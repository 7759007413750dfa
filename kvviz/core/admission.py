"""What KV memory answers: why a request was refused (Reason), the record of an attempt
(Admission) and the pool's O(1) counters (Usage). The compiled rule answers with these
(kvviz/engine: a lane's refused head, a pool's admit); the dashboard and Learn show them."""
from __future__ import annotations

import enum
from typing import NamedTuple


class Reason(str, enum.Enum):
    """Why a request was refused. `need` is what memory would have to place: its tokens (or
    its reservation) in whole blocks or cells, a power of two of cells for buddy, less the
    cached blocks a paged prefix hit serves (`Admission.need_tokens`)."""

    CAPACITY = "CAPACITY"  # free slots in total < need: no layout could serve it
    FRAGMENTATION = "FRAGMENTATION"  # free total >= need, but no placement (contiguous only)
    POLICY = "POLICY"  # a placement exists, the scheduler refused (watermark, batch limits)


class Admission(NamedTuple):
    """The answer to an admission, from the memory as it was asked (before anything is
    placed). Never a negative number as a signal: reason CAPACITY iff not ok and
    free_tokens < need_tokens."""

    ok: bool
    reason: Reason | None
    need_tokens: int
    free_tokens: int
    largest_hole_tokens: int


class Usage(NamedTuple):
    """Cheap O(1) counters of a pool (no snapshot needed)."""

    capacity_tokens: int
    used_tokens: int  # KV slots written by live sequences, shared blocks counted once
    allocated_tokens: int  # slots held by live sequences (used + slack), shared once
    cached_tokens: int  # free slots still holding reusable prefix content (paged+prefix)
    evictions: int  # cached blocks evicted so far (monotonic)

    @property
    def free_tokens(self) -> int:
        return self.capacity_tokens - self.allocated_tokens

    @property
    def slack_tokens(self) -> int:
        return self.allocated_tokens - self.used_tokens
