"""Placement policies for the contiguous allocator, in units of cells.

HoleList keeps free holes sorted by address (first-fit / best-fit, coalescing on free).
Buddy keeps power-of-two blocks per order, splitting on place and merging buddies on free:

    region of 8 cells:  [0 1 2 3 4 5 6 7]  place(3) -> order 2: [0..3] used, [4..7] free
    free [0..3] -> its buddy [4..7] is free -> merged back into [0..7]
"""
from __future__ import annotations

import bisect

import numpy as np


class HoleList:
    def __init__(self, cells: int, best_fit: bool = False) -> None:
        self.best_fit = best_fit
        self.starts = np.array([0], np.int64)
        self.sizes = np.array([cells], np.int64)
        self.free_cells = cells

    def rounded(self, n: int) -> int:
        return n

    def largest(self) -> int:
        return int(self.sizes.max()) if self.sizes.size else 0

    def place(self, n: int) -> int | None:
        fits = self.sizes >= n
        if not fits.any():
            return None
        if self.best_fit:
            cand = np.flatnonzero(fits)
            i = int(cand[np.argmin(self.sizes[cand])])
        else:
            i = int(np.argmax(fits))
        start = int(self.starts[i])
        self._take(i, n)
        return start

    def _take(self, i: int, n: int) -> None:
        if self.sizes[i] == n:
            self.starts, self.sizes = _cut(self.starts, i), _cut(self.sizes, i)
        else:
            self.starts[i] += n
            self.sizes[i] -= n
        self.free_cells -= n

    def free(self, start: int, n: int) -> None:
        j = int(np.searchsorted(self.starts, start))
        merge_prev = j > 0 and self.starts[j - 1] + self.sizes[j - 1] == start
        merge_next = j < self.starts.size and start + n == self.starts[j]
        if merge_prev and merge_next:
            self.sizes[j - 1] += n + self.sizes[j]
            self.starts, self.sizes = _cut(self.starts, j), _cut(self.sizes, j)
        elif merge_prev:
            self.sizes[j - 1] += n
        elif merge_next:
            self.starts[j] = start
            self.sizes[j] += n
        else:
            self.starts = np.concatenate((self.starts[:j], [start], self.starts[j:]))
            self.sizes = np.concatenate((self.sizes[:j], [n], self.sizes[j:]))
        self.free_cells += n

    def grow(self, start: int, size: int, extra: int) -> bool:
        """Extend [start, start+size) in place by `extra` cells if the next hole allows."""
        end = start + size
        j = int(np.searchsorted(self.starts, end))
        if j < self.starts.size and self.starts[j] == end and self.sizes[j] >= extra:
            self._take(j, extra)
            return True
        return False


def _cut(a: np.ndarray, i: int) -> np.ndarray:
    """a without element i (np.delete's result, without its generic overhead)."""
    return np.concatenate((a[:i], a[i + 1:]))


class Buddy:
    def __init__(self, cells: int) -> None:
        # top-level regions: the binary decomposition of `cells`, largest first
        self.regions: list[tuple[int, int]] = []  # (base, order)
        base = 0
        for order in range(cells.bit_length() - 1, -1, -1):
            if cells >> order & 1:
                self.regions.append((base, order))
                base += 1 << order
        self._bases = [b for b, _ in self.regions]
        self.lists: list[list[int]] = [[] for _ in range(max(1, cells.bit_length()))]
        for b, order in self.regions:
            bisect.insort(self.lists[order], b)
        self.free_cells = cells

    @staticmethod
    def order_of(n: int) -> int:
        return max(0, (n - 1).bit_length())

    def rounded(self, n: int) -> int:
        return 1 << self.order_of(n)

    def largest(self) -> int:
        for order in range(len(self.lists) - 1, -1, -1):
            if self.lists[order]:
                return 1 << order
        return 0

    def place(self, n: int) -> int | None:
        k = self.order_of(n)
        j = next((o for o in range(k, len(self.lists)) if self.lists[o]), None)
        if j is None:
            return None
        start = self.lists[j].pop(0)
        while j > k:  # split, keeping the lower half, freeing the upper
            j -= 1
            bisect.insort(self.lists[j], start + (1 << j))
        self.free_cells -= 1 << k
        return start

    def free(self, start: int, n: int) -> None:
        k = self.order_of(n)
        self.free_cells += 1 << k
        base, top = self.regions[bisect.bisect_right(self._bases, start) - 1]
        while k < top:
            buddy = base + ((start - base) ^ (1 << k))
            lst = self.lists[k]
            i = bisect.bisect_left(lst, buddy)
            if i == len(lst) or lst[i] != buddy:
                break
            lst.pop(i)
            start = min(start, buddy)
            k += 1
        bisect.insort(self.lists[k], start)

    def grow(self, start: int, size: int, extra: int) -> bool:
        return False  # a buddy block has a fixed size: growth means moving, which we refuse

    def free_blocks(self) -> list[tuple[int, int]]:
        """(start, size) of every free buddy block, for tests."""
        return [(s, 1 << o) for o, lst in enumerate(self.lists) for s in lst]
