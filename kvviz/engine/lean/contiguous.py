"""The lean lane's contiguous memory: ranges fixed at admission, so the lane is an event queue.

Covers lanes whose reservation holds every request's final length (no range ever grows, no
append fails, nobody is preempted) over slot-sized cells. Placement: buddy uses the allocator's
own (pure Python) Buddy; first-fit and best-fit use `Holes`, the same policy as
kvviz/alloc/placement.HoleList over Python lists, so addresses, failure classes and the
largest hole match the allocator's.
"""
from __future__ import annotations

from bisect import bisect_left

from kvviz.alloc.placement import Buddy
from kvviz.engine.lean.queue import CAPACITY, FRAGMENTATION, LeanLane


class Holes:
    """Free holes sorted by address; first-fit (lowest address) or best-fit (smallest hole,
    then lowest address); coalescing on free."""

    def __init__(self, cells: int, best_fit: bool) -> None:
        self.best_fit = best_fit
        self.starts, self.sizes = [0], [cells]
        self.free_cells = cells

    @staticmethod
    def rounded(n: int) -> int:
        return n

    def largest(self) -> int:
        return max(self.sizes) if self.sizes else 0

    def place(self, n: int) -> int | None:
        sizes = self.sizes
        i = -1
        if self.best_fit:
            for j, s in enumerate(sizes):
                if s >= n and (i < 0 or s < sizes[i]):
                    i = j
        else:
            for j, s in enumerate(sizes):
                if s >= n:
                    i = j
                    break
        if i < 0:
            return None
        start = self.starts[i]
        if sizes[i] == n:
            del self.starts[i], sizes[i]
        else:
            self.starts[i] += n
            sizes[i] -= n
        self.free_cells -= n
        return start

    def free(self, start: int, n: int) -> None:
        starts, sizes = self.starts, self.sizes
        j = bisect_left(starts, start)
        prev = j > 0 and starts[j - 1] + sizes[j - 1] == start
        nxt = j < len(starts) and start + n == starts[j]
        if prev and nxt:
            sizes[j - 1] += n + sizes[j]
            del starts[j], sizes[j]
        elif prev:
            sizes[j - 1] += n
        elif nxt:
            starts[j] = start
            sizes[j] += n
        else:
            starts.insert(j, start)
            sizes.insert(j, n)
        self.free_cells += n


class LeanContiguous(LeanLane):
    def __init__(self, lane) -> None:
        super().__init__(lane)
        a = lane.alloc
        self.place = Buddy(a.cells) if a.placement == "buddy" else Holes(
            a.cells, a.placement == "best-fit")
        self.start = [0] * self.n_req
        self.cells = [0] * self.n_req
        self.held = 0  # reserved slots
        self.internal = 0  # reserved slots past the final lengths

    def check(self, n: int, r: int | None) -> tuple:
        cells = self.place.rounded(n if r is None else r)
        largest, free = self.place.largest(), self.place.free_cells
        if largest >= cells:
            return True, 0, cells, free, largest
        return False, CAPACITY if free < cells else FRAGMENTATION, cells, free, largest

    def admit(self, rid: int, n: int, r: int | None) -> int | None:
        cells = self.place.rounded(n if r is None else r)
        start = self.place.place(cells)
        if start is None:
            return None
        self.start[rid], self.cells[rid] = start, cells
        self.held += cells
        self.internal += cells - self.final[rid]
        return self.place.free_cells

    def release(self, rid: int) -> None:
        cells = self.cells[rid]
        self.place.free(self.start[rid], cells)
        self.held -= cells
        self.internal -= cells - self.final[rid]
        self.used -= self.off[rid] + self.T

    def decode(self) -> None:
        n = len(self.run)
        self.used += n
        self.tokens += n

    def _efi(self) -> float:
        free = self.capacity - self.held
        return 1.0 - self.place.largest() / free if free > 0 else 0.0

    def step_sums(self) -> tuple[int, int, int, int, int, float]:
        used, internal = self.used, self.internal
        return (used, self.held - used - internal, internal, self.capacity - self.held, 0,
                self._efi())

    def horizon(self, limit: int) -> int:
        if not self.run:
            return max(limit, 0)
        return max(0, min(limit, self.next_finish() - 1 - self.T))

    def span(self, m: int) -> tuple[int, int, int, int, int]:
        n = len(self.run)
        used = m * self.used + n * m * (m + 1) // 2
        internal = m * self.internal
        alloc = m * self.held
        self.used += n * m
        self.tokens += n * m
        self.T += m
        return used, alloc - used - internal, internal, m * self.capacity - alloc, 0
