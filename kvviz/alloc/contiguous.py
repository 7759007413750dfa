"""Contiguous allocator: one range of slots per sequence, placed first-fit, best-fit or buddy.

Ranges are whole cells of `cell_tokens` slots (1 = slot-exact). A sequence that writes past
its reservation grows in place when the next cells are free, else the append fails.
"""
from __future__ import annotations

import numpy as np

from kvviz.alloc.base import Admission, Allocator, PrefixKey, Reason, Usage
from kvviz.alloc.placement import Buddy, HoleList
from kvviz.alloc.rows import RowTable, grow_to
from kvviz.core.blockmap import FREE, BlockMap


class ContiguousAllocator(Allocator):
    contiguous = True

    def __init__(
        self, capacity_tokens: int, placement: str = "first-fit", *, cell_tokens: int = 1,
        bytes_per_token: int = 0, label: str | None = None,
    ) -> None:
        if cell_tokens < 1:
            raise ValueError(f"cell_tokens must be >= 1, got {cell_tokens}")
        cells = capacity_tokens // cell_tokens
        if cells < 1:
            raise ValueError(f"capacity_tokens {capacity_tokens} is below one cell")
        if placement == "first-fit":
            self._place: HoleList | Buddy = HoleList(cells)
        elif placement == "best-fit":
            self._place = HoleList(cells, best_fit=True)
        elif placement == "buddy":
            self._place = Buddy(cells)
        else:
            raise ValueError(f"placement: unknown {placement!r}; use first-fit, best-fit, buddy")
        self.placement = placement
        self._exact = placement != "buddy"  # a range takes exactly the cells it needs
        self.block_size = cell_tokens
        self.cells = cells
        self.bytes_per_token = bytes_per_token
        self.label = label or f"contiguous:{placement}"
        self._rows = RowTable()
        self._start = np.zeros(self._rows.capacity, np.int64)  # cells
        self._size = np.zeros(self._rows.capacity, np.int64)  # cells
        self._len = np.zeros(self._rows.capacity, np.int64)  # tokens written
        self._used = 0
        self._held_cells = 0

    # ---- queries ---------------------------------------------------------------------------
    def usage(self) -> Usage:
        g = self.block_size
        return Usage(self.cells * g, self._used, self._held_cells * g, 0, 0)

    def _answer(self, ok: bool, need_cells: int) -> Admission:
        """need_cells: the cells the placement must find (rounded: whole cells, buddy's
        power of two). CAPACITY when fewer cells are free in total, else FRAGMENTATION."""
        g = self.block_size
        free = self._place.free_cells
        reason = None
        if not ok:
            reason = Reason.CAPACITY if free < need_cells else Reason.FRAGMENTATION
        return Admission(ok, reason, need_cells * g, free * g, self._place.largest() * g)

    def seq_allocated_tokens(self, seq_ids: np.ndarray) -> np.ndarray:
        return self._size[self._rows.rows(seq_ids)] * self.block_size

    def seq_held_tokens(self, seq_id: int) -> int:
        """seq_allocated_tokens for one live sequence, as an int."""
        return int(self._size[self._rows.row(seq_id)]) * self.block_size

    def efi(self) -> float:
        """The external fragmentation index: 1 - largest hole / free slots (0.0 when full)."""
        g = self.block_size
        free = (self.cells - self._held_cells) * g
        return 1.0 - self._place.largest() * g / free if free > 0 else 0.0

    def seq_len(self, seq_id: int) -> int:
        return int(self._len[self._rows.row(seq_id)])

    def ranges(self, seq_ids: np.ndarray) -> np.ndarray:
        """int64 [B, 2]: (first slot, reserved slots) of each sequence's range."""
        rows = self._rows.rows(seq_ids)
        return np.stack([self._start[rows] * self.block_size, self._size[rows] * self.block_size],
                        axis=1)

    def _cells_for(self, num_tokens: int, reserve_tokens: int | None) -> tuple[int, int]:
        need = num_tokens if reserve_tokens is None else reserve_tokens
        if num_tokens < 1 or need < num_tokens:
            if num_tokens < 1:
                raise ValueError(f"num_tokens must be >= 1, got {num_tokens}")
            raise ValueError(
                f"reserve_tokens {reserve_tokens} is smaller than num_tokens {num_tokens}")
        cells = -(-need // self.block_size)
        return need, cells if self._exact else 1 << (cells - 1).bit_length()  # buddy's

    def footprint_tokens(self, num_tokens: int, reserve_tokens: int | None = None) -> int:
        return self._cells_for(num_tokens, reserve_tokens)[1] * self.block_size

    def footprints(self, tokens: np.ndarray) -> np.ndarray:
        t = np.asarray(tokens, np.int64)
        if t.size and t.min() < 1:
            return super().footprints(t)  # the per-size error
        cells = -(-t // self.block_size)
        if self.placement == "buddy":  # 1 << (cells - 1).bit_length(), elementwise
            x, order = cells - 1, np.zeros(cells.shape, np.int64)
            while x.size and x.max() > 0:
                order += x > 0
                x >>= 1
            cells = np.left_shift(1, order)
        return cells * self.block_size

    def check(self, num_tokens: int, reserve_tokens: int | None = None) -> Admission:
        cells = self._cells_for(num_tokens, reserve_tokens)[1]
        place, g = self._place, self.block_size
        largest, free = place.largest(), place.free_cells
        if largest >= cells:
            return Admission(True, None, cells * g, free * g, largest * g)
        reason = Reason.CAPACITY if free < cells else Reason.FRAGMENTATION
        return Admission(False, reason, cells * g, free * g, largest * g)

    # ---- verbs -----------------------------------------------------------------------------
    def admit(
        self, seq_id: int, num_tokens: int, reserve_tokens: int | None = None,
        prefix: PrefixKey | None = None,
    ) -> Admission:
        cells = self._cells_for(num_tokens, reserve_tokens)[1]
        if seq_id < 0:
            raise ValueError(f"seq_id must be >= 0, got {seq_id}")
        if 0 <= seq_id < self._rows.row_of_seq.shape[0] and self._rows.row_of_seq[seq_id] >= 0:
            raise ValueError(f"seq_id {seq_id} is already live")
        start = self._place.place(cells)
        if start is None:
            return self._answer(False, cells)
        row, grew = self._rows.add(seq_id)
        if grew:
            n = self._rows.capacity
            self._start, self._size, self._len = (
                grow_to(a, n) for a in (self._start, self._size, self._len))
        self._start[row], self._size[row], self._len[row] = start, cells, num_tokens
        self._used += num_tokens
        self._held_cells += cells
        return self._answer(True, cells)

    def append(self, seq_id: int, num_tokens: int = 1) -> Admission:
        if num_tokens < 1:
            raise ValueError(f"num_tokens must be >= 1, got {num_tokens}")
        row = self._rows.row(seq_id)
        end = int(self._len[row]) + num_tokens
        size = int(self._size[row])
        extra = -(-end // self.block_size) - size
        if extra > 0:
            start = int(self._start[row])
            if not self._place.grow(start, size, extra):
                return self._answer(False, extra)
            self._size[row] = size + extra
            self._held_cells += extra
        self._len[row] = end
        self._used += num_tokens
        return self._answer(True, max(0, extra))

    def append_batch(self, seq_ids: np.ndarray) -> np.ndarray:
        seq_ids = np.asarray(seq_ids, np.int64)
        rows = self._rows.rows(seq_ids)
        room = self._len[rows] < self._size[rows] * self.block_size
        fast = rows[room]
        self._len[fast] += 1
        self._used += int(fast.size)
        if room.all():
            return room
        ok = room.copy()
        for i in np.flatnonzero(~room):
            ok[i] = self.append(int(seq_ids[i])).ok
        return ok

    def release(self, seq_id: int) -> None:
        row = self._rows.remove(seq_id)
        start, size = int(self._start[row]), int(self._size[row])
        self._place.free(start, size)
        self._used -= int(self._len[row])
        self._held_cells -= size
        self._size[row] = 0
        self._len[row] = 0

    def snapshot(self) -> BlockMap:
        g = self.block_size
        live = np.flatnonzero(self._rows.seq_of_row >= 0)  # every live range, cell by cell
        size = self._size[live]
        rows = np.repeat(live, size)
        rel = np.arange(rows.size) - np.repeat(np.cumsum(size) - size, size)
        owned = self._start[rows] + rel
        owner = np.full(self.cells, FREE, np.int32)
        owner[owned] = self._rows.seq_of_row[rows]
        filled = np.zeros(self.cells, np.int32)
        filled[owned] = np.clip(self._len[rows] - rel * g, 0, g)
        allocated = np.zeros(self.cells, np.int32)
        allocated[owned] = g
        refcount = np.zeros(self.cells, np.int16)
        refcount[owned] = 1
        return BlockMap(
            owner=owner, filled=filled, allocated=allocated, refcount=refcount,
            cached=np.zeros(self.cells, np.bool_), block_size=g,
            bytes_per_token=self.bytes_per_token, label=self.label, contiguous=True,
            buddy=self.placement == "buddy",
        )
