"""Dense per-sequence rows shared by the allocators: seq_id -> row, grown on demand.

Rows let the decode step index per-sequence state with numpy fancy indexing instead of a
Python dict lookup per sequence.
"""
from __future__ import annotations

import numpy as np


class RowTable:
    def __init__(self, rows: int = 64) -> None:
        self.row_of_seq = np.full(64, -1, np.int64)  # seq_id -> row (-1: not live)
        self.seq_of_row = np.full(rows, -1, np.int64)
        self._free_rows = list(range(rows - 1, -1, -1))
        self.live = 0

    def _grow_rows(self) -> int:
        old = self.seq_of_row.shape[0]
        self.seq_of_row = np.concatenate([self.seq_of_row, np.full(old, -1, np.int64)])
        self._free_rows.extend(range(2 * old - 1, old - 1, -1))
        return old

    def add(self, seq_id: int) -> tuple[int, bool]:
        """Claim a row for a new sequence; returns (row, grew) so callers can resize."""
        if seq_id < 0:
            raise ValueError(f"seq_id must be >= 0, got {seq_id}")
        if seq_id >= self.row_of_seq.shape[0]:
            n = max(seq_id + 1, 2 * self.row_of_seq.shape[0])
            self.row_of_seq = np.concatenate(
                [self.row_of_seq, np.full(n - self.row_of_seq.shape[0], -1, np.int64)])
        if self.row_of_seq[seq_id] >= 0:
            raise ValueError(f"seq_id {seq_id} is already live")
        grew = False
        if not self._free_rows:
            self._grow_rows()
            grew = True
        row = self._free_rows.pop()
        self.row_of_seq[seq_id] = row
        self.seq_of_row[row] = seq_id
        self.live += 1
        return row, grew

    def add_many(self, seq_ids: np.ndarray) -> tuple[np.ndarray, bool]:
        """Claim rows for new sequences (caller checked none is live); returns (rows, grew)."""
        k = int(seq_ids.size)
        top = int(seq_ids.max()) if k else -1
        if top >= self.row_of_seq.shape[0]:
            n = max(top + 1, 2 * self.row_of_seq.shape[0])
            self.row_of_seq = np.concatenate(
                [self.row_of_seq, np.full(n - self.row_of_seq.shape[0], -1, np.int64)])
        grew = False
        while len(self._free_rows) < k:
            self._grow_rows()
            grew = True
        rows = np.asarray(self._free_rows[len(self._free_rows) - k:][::-1], np.int64)
        del self._free_rows[len(self._free_rows) - k:]
        self.row_of_seq[seq_ids] = rows
        self.seq_of_row[rows] = seq_ids
        self.live += k
        return rows, grew

    def remove_many(self, seq_ids: np.ndarray) -> np.ndarray:
        rows = self.rows(seq_ids)
        self.row_of_seq[seq_ids] = -1
        self.seq_of_row[rows] = -1
        self._free_rows.extend(rows.tolist())
        self.live -= int(rows.size)
        return rows

    def is_live(self, seq_ids: np.ndarray) -> np.ndarray:
        seq_ids = np.asarray(seq_ids, np.int64)
        inside = seq_ids < self.row_of_seq.shape[0]
        out = np.zeros(seq_ids.size, np.bool_)
        out[inside] = self.row_of_seq[seq_ids[inside]] >= 0
        return out

    def row(self, seq_id: int) -> int:
        if not 0 <= seq_id < self.row_of_seq.shape[0] or self.row_of_seq[seq_id] < 0:
            raise KeyError(f"sequence {seq_id} is not live")
        return int(self.row_of_seq[seq_id])

    def rows(self, seq_ids: np.ndarray) -> np.ndarray:
        """Rows of live sequences (hot path: one gather and one reduction)."""
        try:
            rows = self.row_of_seq[seq_ids]
        except IndexError:
            raise KeyError("a sequence in the batch is not live") from None
        if rows.size and rows.min() < 0:
            bad = np.asarray(seq_ids)[rows < 0][0]
            raise KeyError(f"sequence {int(bad)} is not live")
        return rows

    def remove(self, seq_id: int) -> int:
        row = self.row(seq_id)
        self.row_of_seq[seq_id] = -1
        self.seq_of_row[row] = -1
        self._free_rows.append(row)
        self.live -= 1
        return row

    @property
    def capacity(self) -> int:
        return int(self.seq_of_row.shape[0])


def grow_to(arr: np.ndarray, n: int, fill: int = 0) -> np.ndarray:
    """Return arr extended along axis 0 to n rows (filled with `fill`)."""
    if arr.shape[0] >= n:
        return arr
    extra = np.full((n - arr.shape[0],) + arr.shape[1:], fill, arr.dtype)
    return np.concatenate([arr, extra])
