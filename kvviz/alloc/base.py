"""The allocator interface: the only way the scheduler touches KV memory.

Verbs: admit / append / release / snapshot (plus check, fork and cheap read-only queries).
Free lists, ranges, reference counts and hashes stay private to each implementation.
Sequence ids are non-negative ints (the engine uses request indices).
"""
from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from typing import NamedTuple

import numpy as np

from kvviz.core.blockmap import BlockMap


class Reason(str, enum.Enum):
    """Why a request was refused. `need` is what the allocator would have to place: the
    request's reservation rounded up to whole blocks or cells (a power of two of cells for
    buddy), which is `Admission.need_tokens`."""

    CAPACITY = "CAPACITY"  # free slots in total < need: no layout could serve it
    FRAGMENTATION = "FRAGMENTATION"  # free total >= need, but no placement (contiguous only)
    POLICY = "POLICY"  # a placement exists, the scheduler refused (watermark, batch limits)


class Admission(NamedTuple):
    """Outcome of admit / append / check. Never a negative number as a signal.

    need_tokens: the slots the allocator has to place (rounded to its blocks / cells / power
    of two); reason CAPACITY iff not ok and free_tokens < need_tokens.
    """

    ok: bool
    reason: Reason | None
    need_tokens: int
    free_tokens: int
    largest_hole_tokens: int


class Usage(NamedTuple):
    """Cheap O(1) counters, read every step by the engine (no snapshot needed)."""

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


class PrefixKey(NamedTuple):
    """The first `length` tokens are identical for every sequence with the same `group`."""

    group: int
    length: int


class Allocator(ABC):
    """Base class. `label` names the lane's allocator in the UI and in recordings."""

    label: str
    block_size: int  # slots per block (cell size for contiguous allocators)
    contiguous: bool

    @abstractmethod
    def admit(
        self, seq_id: int, num_tokens: int, reserve_tokens: int | None = None,
        prefix: PrefixKey | None = None,
    ) -> Admission:
        """Place a new sequence whose first `num_tokens` slots are written now (prefill).

        `reserve_tokens` (>= num_tokens) asks for that many slots up front; None means only
        what num_tokens needs. On failure nothing changes and the reason says why.
        Raises ValueError for a seq_id already live or a bad size.
        """

    @abstractmethod
    def check(self, num_tokens: int, reserve_tokens: int | None = None) -> Admission:
        """What admit would answer, without changing anything (prefix hits not counted)."""

    @abstractmethod
    def append(self, seq_id: int, num_tokens: int = 1) -> Admission:
        """Write `num_tokens` more slots for a live sequence, growing its allocation if needed.

        On failure the sequence is unchanged (the engine then preempts it).
        """

    def append_batch(self, seq_ids: np.ndarray) -> np.ndarray:
        """One token for each sequence in order; returns bool ok per sequence.

        Earlier sequences get memory first. Implementations vectorize this; the decode step
        of the engine calls only this.
        """
        return np.fromiter((self.append(int(s)).ok for s in seq_ids), bool, len(seq_ids))

    def admit_many(
        self, seq_ids: np.ndarray, num_tokens: np.ndarray, reserve_tokens: np.ndarray | None = None,
        prefixes: list[PrefixKey | None] | None = None, keep_free_tokens: int = 0,
        out_free: np.ndarray | None = None,
    ) -> int:
        """Admit a FCFS prefix of the candidates; return how many were admitted.

        Stops at the first candidate that does not fit, or whose admission would leave fewer
        than `keep_free_tokens` free (a watermark). If `out_free` (int64, one per candidate)
        is given, out_free[i] receives the free total right after the i-th admission.
        Implementations vectorize this.
        """
        for i in range(len(seq_ids)):
            n = int(num_tokens[i])
            r = None if reserve_tokens is None else int(reserve_tokens[i])
            if keep_free_tokens:
                chk = self.check(n, r)
                if not chk.ok or chk.free_tokens - self.footprint_tokens(n, r) < keep_free_tokens:
                    return i
            adm = self.admit(int(seq_ids[i]), n, r, prefixes[i] if prefixes else None)
            if not adm.ok:
                return i
            if out_free is not None:
                out_free[i] = adm.free_tokens
        return len(seq_ids)

    def footprint_tokens(self, num_tokens: int, reserve_tokens: int | None = None) -> int:
        """Slots a new sequence of this size takes, after rounding to blocks or cells."""
        return num_tokens if reserve_tokens is None else max(num_tokens, reserve_tokens)

    def footprints(self, tokens: np.ndarray) -> np.ndarray:
        """footprint_tokens for each size (vectorized where the rounding allows)."""
        return np.fromiter((self.footprint_tokens(int(t)) for t in tokens), np.int64,
                           len(tokens))

    @abstractmethod
    def release(self, seq_id: int) -> None:
        """Free everything the sequence holds. Raises KeyError for an unknown sequence."""

    def release_many(self, seq_ids: np.ndarray) -> None:
        """release() for each; implementations vectorize this."""
        for s in np.asarray(seq_ids).tolist():
            self.release(s)

    @abstractmethod
    def snapshot(self) -> BlockMap:
        """A frozen BlockMap of the current state (copies; later calls do not mutate it)."""

    @abstractmethod
    def usage(self) -> Usage:
        """O(1) counters."""

    @abstractmethod
    def seq_allocated_tokens(self, seq_ids: np.ndarray) -> np.ndarray:
        """int64 slots held by each given live sequence (shared blocks count for each)."""

    def fork(self, parent_id: int, child_id: int) -> Admission:
        """Make child share parent's KV (parallel sampling). Paged only."""
        raise NotImplementedError(f"{type(self).__name__} does not support fork")

    @property
    def capacity_tokens(self) -> int:
        return self.usage().capacity_tokens
