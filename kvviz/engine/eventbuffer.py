"""An event log's add_one / add_many, kept as Python rows and appended to the log at once.

A queue window (kvviz/engine/queue.py) logs a few events per asked step through the lane's
own logging (Lane.log_schedule, log_finished): numpy slice assignments on one-element
arrays cost more than the step's decision. While the window runs, the lane logs into an
EventBuffer instead; `flush` (at the window's end, and every ROWS rows) appends the rows,
in the order they were logged, to the real log with one `EventLog.extend`, so the log holds
exactly what direct calls would have put there.
"""
from __future__ import annotations

import numpy as np

from kvviz.engine.eventlog import DTYPES, EventColumns, EventLog

_ROW = np.dtype(list(DTYPES.items()))  # one event, its fields in the log's dtypes
ROWS = 4096  # rows kept before they go to the log (bounds the buffer's memory)


class EventBuffer:
    def __init__(self, log: EventLog) -> None:
        self.log = log
        self.lanes = log.lanes
        self._rows: list[tuple] = []

    def add_one(self, time_s: float, step: int, lane: int, kind: int, seq_id: int,
                reason: int = 0, need_tokens: int = 0, free_tokens: int = 0,
                largest_hole_tokens: int = 0, count: int = 1) -> None:
        self._rows.append((time_s, step, lane, kind, seq_id, reason, need_tokens, free_tokens,
                           largest_hole_tokens, count))
        if len(self._rows) >= ROWS:
            self.flush()

    def add_many(self, time_s: float, step: int, lane: int, kind: int, seq_ids: np.ndarray,
                 need_tokens: np.ndarray | int = 0, free_tokens: np.ndarray | int = 0) -> None:
        ids = seq_ids.tolist() if isinstance(seq_ids, np.ndarray) else list(seq_ids)
        k = len(ids)
        if not k:
            return
        if isinstance(need_tokens, int) and isinstance(free_tokens, int):  # one for all
            self._rows.extend([(time_s, step, lane, kind, r, 0, need_tokens, free_tokens, 0, 1)
                               for r in ids])
        else:
            need, free = _column(need_tokens, k), _column(free_tokens, k)
            if len(need) != k or len(free) != k:
                raise ValueError(
                    f"add_many: {k} sequences, {len(need)} needs, {len(free)} frees")
            self._rows.extend([(time_s, step, lane, kind, r, 0, n, f, 0, 1)
                               for r, n, f in zip(ids, need, free)])
        if len(self._rows) >= ROWS:
            self.flush()

    def flush(self) -> None:
        """Append what was logged to the log (one slice per field) and forget it."""
        if not self._rows:
            return
        table = np.array(self._rows, _ROW)  # rows to columns in one conversion
        self._rows = []
        cols = {f: table[f] for f in DTYPES}
        self.log.extend(EventColumns(cols, self.log.lanes))


def _column(x, k: int) -> list:
    """add_many's argument as k values (an array or a sequence, or one value for all)."""
    if isinstance(x, np.ndarray):
        return x.tolist() if x.ndim else [x.item()] * k
    if isinstance(x, (list, tuple)):
        return list(x)
    return [x] * k
