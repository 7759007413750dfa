"""Engine events: admitted, admit_failed, preempted, finished, evicted, rejected, partial.

The log is columnar: one growable numpy array per field, strings (lane, kind, reason) as
small integer codes. The engine appends a whole step's admissions or completions with one
slice assignment per field (`add_many`), and a reader takes what came since its cursor as
`EventColumns` — ten array slices, whatever the number of events. A busy unpaced run makes
~20,000 events/s, too many to hand to the store writer as one Python tuple each
(docs/BENCHMARKS.md, decision log).
`Event` tuples are still available (`EventLog.events`, `EventColumns.to_events`) for tests
and small reports.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple

import numpy as np

KINDS = ("admitted", "admit_failed", "preempted", "finished", "evicted", "rejected",
         "partial")  # partial: kvviz/engine/rule/scheduler.py, log_partial
REASONS = (None, "CAPACITY", "FRAGMENTATION", "POLICY")  # code 0: no reason
KIND_CODE = {k: i for i, k in enumerate(KINDS)}
REASON_CODE = {r: i for i, r in enumerate(REASONS)}

MAX_STEP = 2**63 - 1  # events store the step as int64

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


# Column name -> dtype; the order is Event's. lane / kind / reason hold codes (int8).
DTYPES = {"time_s": np.float64, "step": np.int64, "lane": np.int8, "kind": np.int8,
          "seq_id": np.int64, "reason": np.int8, "need_tokens": np.int64,
          "free_tokens": np.int64, "largest_hole_tokens": np.int64, "count": np.int64}
FIELDS = tuple(DTYPES)
assert FIELDS == Event._fields


class EventColumns:
    """A run of events as numpy columns (FIELDS); `lanes` decodes the lane codes."""

    __slots__ = ("cols", "lanes")

    def __init__(self, cols: dict[str, np.ndarray], lanes: Sequence[str]) -> None:
        n = {len(a) for a in cols.values()}
        if set(cols) != set(FIELDS) or len(n) > 1:
            raise ValueError(f"event columns: need the fields {list(FIELDS)} with equal "
                             f"lengths, got {sorted(cols)} with lengths {sorted(n)}")
        self.cols = cols
        self.lanes = tuple(lanes)

    @classmethod
    def empty(cls, lanes: Sequence[str] = ()) -> EventColumns:
        return cls({f: np.empty(0, d) for f, d in DTYPES.items()}, lanes)

    @classmethod
    def from_events(cls, events: Iterable) -> EventColumns:
        """From Event-like objects (attributes named as FIELDS)."""
        evs = list(events)
        lanes = sorted({e.lane for e in evs})
        code = {name: i for i, name in enumerate(lanes)}
        cols = {f: np.array([getattr(e, f) for e in evs], DTYPES[f]) for f in FIELDS
                if f not in ("lane", "kind", "reason")}
        cols["lane"] = np.array([code[e.lane] for e in evs], np.int8)
        cols["kind"] = np.array([KIND_CODE[e.kind] for e in evs], np.int8)
        cols["reason"] = np.array([REASON_CODE[e.reason] for e in evs], np.int8)
        return cls({f: cols[f] for f in FIELDS}, lanes)

    def __len__(self) -> int:
        return len(self.cols["seq_id"])

    def __getitem__(self, field: str) -> np.ndarray:
        return self.cols[field]

    def shifted(self, time_s: float = 0.0, seq_id: int = 0) -> EventColumns:
        """Times plus `time_s`; sequence ids (not the lane-wide -1) plus `seq_id`."""
        cols = dict(self.cols)
        if time_s:
            cols["time_s"] = cols["time_s"] + time_s
        if seq_id:
            s = cols["seq_id"]
            cols["seq_id"] = np.where(s >= 0, s + seq_id, s)
        return EventColumns(cols, self.lanes)

    def rows(self) -> list[tuple]:
        """One tuple of Python values per event, in FIELDS order (strings decoded)."""
        if not len(self):
            return []
        c = self.cols
        lanes = np.array(self.lanes, dtype=object)
        kinds = np.array(KINDS, dtype=object)
        reasons = np.array(REASONS, dtype=object)
        return list(zip(c["time_s"].tolist(), c["step"].tolist(), lanes[c["lane"]].tolist(),
                        kinds[c["kind"]].tolist(), c["seq_id"].tolist(),
                        reasons[c["reason"]].tolist(), c["need_tokens"].tolist(),
                        c["free_tokens"].tolist(), c["largest_hole_tokens"].tolist(),
                        c["count"].tolist()))

    def to_events(self) -> list[Event]:
        return [Event._make(r) for r in self.rows()]


class EventLog:
    """Append-only. Readers keep a cursor (events ever added before it) and ask for what came
    since; `trim` forgets what every reader has taken, so a day-long run stays bounded."""

    def __init__(self, capacity: int = 4096) -> None:
        self._a = {f: np.zeros(capacity, d) for f, d in DTYPES.items()}
        self._n = 0  # events held
        self._base = 0  # events trimmed off the front
        self.lanes: list[str] = []

    def lane_code(self, name: str) -> int:
        """The code of lane `name` (registered on first use)."""
        if name not in self.lanes:
            if len(self.lanes) >= 127:
                raise ValueError("event log: at most 127 lanes")
            self.lanes.append(name)
        return self.lanes.index(name)

    def _room(self, k: int) -> int:
        n = self._n
        if n + k > len(self._a["seq_id"]):
            size = max(2 * len(self._a["seq_id"]), n + k)
            for f, a in self._a.items():
                b = np.zeros(size, a.dtype)
                b[:n] = a[:n]
                self._a[f] = b
        self._n = n + k
        return n

    def add_one(self, time_s: float, step: int, lane: int, kind: int, seq_id: int,
                reason: int = 0, need_tokens: int = 0, free_tokens: int = 0,
                largest_hole_tokens: int = 0, count: int = 1) -> None:
        """One event from codes (lane: lane_code, kind: KIND_CODE, reason: REASON_CODE)."""
        i = self._room(1)
        a = self._a
        a["time_s"][i], a["step"][i], a["lane"][i], a["kind"][i] = time_s, step, lane, kind
        a["seq_id"][i], a["reason"][i], a["need_tokens"][i] = seq_id, reason, need_tokens
        a["free_tokens"][i], a["largest_hole_tokens"][i] = free_tokens, largest_hole_tokens
        a["count"][i] = count

    def add_many(self, time_s: float | np.ndarray, step: int | np.ndarray, lane: int, kind: int,
                 seq_ids: np.ndarray, need_tokens: np.ndarray | int = 0,
                 free_tokens: np.ndarray | int = 0, count: np.ndarray | int = 1) -> None:
        """One event per sequence id, in the given order; time_s, step (the same for all, or
        one each), need_tokens, free_tokens and count are a value for all or one each."""
        k = len(seq_ids)
        if not k:
            return
        i = self._room(k)
        a, s = self._a, slice(i, i + k)
        a["time_s"][s], a["step"][s], a["lane"][s], a["kind"][s] = time_s, step, lane, kind
        a["seq_id"][s], a["reason"][s], a["need_tokens"][s] = seq_ids, 0, need_tokens
        a["free_tokens"][s], a["largest_hole_tokens"][s], a["count"][s] = free_tokens, 0, count

    def extend(self, cols: EventColumns, owned: bool = False) -> None:
        """Append a run of events whose lane codes are this log's (one slice per field).
        owned: the caller hands the columns over (nobody else reads or writes them after);
        an empty log keeps them as its own instead of copying them."""
        k = len(cols)
        if k and owned and self._n == 0:
            self._a = {f: cols[f] for f in FIELDS}
            self._n = k
        elif k:
            i = self._room(k)
            for f, a in self._a.items():
                a[i:i + k] = cols[f]

    def merge(self, parts: list[EventColumns], order: np.ndarray) -> None:
        """Append the events of `parts` (this log's lane codes) in `order`, an index into
        their concatenation; one field at a time, so the peak holds one merged column."""
        k = int(order.size)
        if k:
            i = self._room(k)
            for f, a in self._a.items():
                a[i:i + k] = np.concatenate([p.cols[f] for p in parts])[order]

    def add(self, ev: Event) -> None:
        self.add_one(ev.time_s, ev.step, self.lane_code(ev.lane), KIND_CODE[ev.kind],
                     ev.seq_id, REASON_CODE[ev.reason], ev.need_tokens, ev.free_tokens,
                     ev.largest_hole_tokens, ev.count)

    def since(self, cursor: int) -> tuple[EventColumns, int]:
        """The events added since `cursor` (copies) and the new cursor."""
        lo = cursor - self._base
        if lo < 0:
            raise ValueError(f"event log: cursor {cursor} is before the oldest event kept "
                             f"({self._base}); it was trimmed")
        cols = {f: a[lo:self._n].copy() for f, a in self._a.items()}
        return EventColumns(cols, self.lanes), len(self)

    def trim(self, cursor: int) -> None:
        """Forget the events before `cursor`."""
        k = min(max(0, cursor - self._base), self._n)
        if k:
            for a in self._a.values():
                a[:self._n - k] = a[k:self._n]
            self._n -= k
            self._base += k

    @property
    def oldest(self) -> int:
        """The cursor of the oldest event held (what `trim` has dropped before it)."""
        return self._base

    @property
    def events(self) -> list[Event]:
        """The events held, as tuples (O(n): for tests and small runs)."""
        return self.since(self._base)[0].to_events()

    def __len__(self) -> int:
        """Events ever added (the cursor after the newest)."""
        return self._base + self._n
