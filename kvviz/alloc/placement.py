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
    """Free holes as two address-sorted Python lists (starts, sizes): a few hundred holes at
    most (one per live range, plus one), where list scans beat numpy calls."""

    def __init__(self, cells: int, best_fit: bool = False) -> None:
        self.best_fit = best_fit
        self._starts: list[int] = [0]
        self._sizes: list[int] = [cells]
        self.free_cells = cells
        self._largest: int | None = cells  # the largest hole (None: recount it)

    @property
    def starts(self) -> np.ndarray:
        return np.asarray(self._starts, np.int64)

    @property
    def sizes(self) -> np.ndarray:
        return np.asarray(self._sizes, np.int64)

    def rounded(self, n: int) -> int:
        return n

    def largest(self) -> int:
        if self._largest is None:
            self._largest = max(self._sizes, default=0)
        return self._largest

    def place(self, n: int) -> int | None:
        if n > self.largest():
            return None
        sizes = self._sizes
        if self.best_fit:  # the smallest hole that fits, the first of equals
            i, best = -1, 0
            for k, x in enumerate(sizes):
                if x >= n and (i < 0 or x < best):
                    i, best = k, x
                    if x == n:
                        break
        else:
            i = next(k for k, x in enumerate(sizes) if x >= n)
        start = self._starts[i]
        self._take(i, n)
        return start

    def _take(self, i: int, n: int) -> None:
        size = self._sizes[i]
        if size == self._largest:  # the largest hole shrinks: recount on demand
            self._largest = None
        if size == n:
            del self._starts[i], self._sizes[i]
        else:
            self._starts[i] += n
            self._sizes[i] = size - n
        self.free_cells -= n

    def free(self, start: int, n: int) -> None:
        starts, sizes = self._starts, self._sizes
        j = bisect.bisect_left(starts, start)
        merge_prev = j > 0 and starts[j - 1] + sizes[j - 1] == start
        merge_next = j < len(starts) and start + n == starts[j]
        if merge_prev and merge_next:
            sizes[j - 1] += n + sizes[j]
            del starts[j], sizes[j]
        elif merge_prev:
            sizes[j - 1] += n
        elif merge_next:
            starts[j] = start
            sizes[j] += n
        else:
            starts.insert(j, start)
            sizes.insert(j, n)
        self.free_cells += n
        if self._largest is not None:  # the hole that took the freed cells
            self._largest = max(self._largest, sizes[j - 1 if merge_prev else j])

    def grow(self, start: int, size: int, extra: int) -> bool:
        """Extend [start, start+size) in place by `extra` cells if the next hole allows."""
        end = start + size
        j = bisect.bisect_left(self._starts, end)
        if j < len(self._starts) and self._starts[j] == end and self._sizes[j] >= extra:
            self._take(j, extra)
            return True
        return False


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
        self._largest: int | None = None  # the largest free block (None: recount it)

    @staticmethod
    def order_of(n: int) -> int:
        return (n - 1).bit_length() if n > 0 else 1

    def rounded(self, n: int) -> int:
        return 1 << self.order_of(n)

    def largest(self) -> int:
        if self._largest is None:
            self._largest = next((1 << o for o in range(len(self.lists) - 1, -1, -1)
                                  if self.lists[o]), 0)
        return self._largest

    def place(self, n: int) -> int | None:
        k = (n - 1).bit_length() if n > 0 else 1
        lists = self.lists
        for j in range(k, len(lists)):
            if lists[j]:
                break
        else:
            return None
        start = lists[j].pop(0)
        if not lists[j] and 1 << j == self._largest:
            self._largest = None
        while j > k:  # split, keeping the lower half, freeing the upper
            j -= 1
            bisect.insort(lists[j], start + (1 << j))
        self.free_cells -= 1 << k
        return start

    def free(self, start: int, n: int) -> None:
        k = (n - 1).bit_length() if n > 0 else 1
        self.free_cells += 1 << k
        regions = self.regions
        base, top = regions[0] if len(regions) == 1 else regions[
            bisect.bisect_right(self._bases, start) - 1]
        lists = self.lists
        while k < top:
            buddy = base + ((start - base) ^ (1 << k))
            lst = lists[k]
            i = bisect.bisect_left(lst, buddy)
            if i == len(lst) or lst[i] != buddy:
                break
            del lst[i]
            if buddy < start:
                start = buddy
            k += 1
        bisect.insort(lists[k], start)
        if self._largest is not None and 1 << k > self._largest:
            self._largest = 1 << k

    def grow(self, start: int, size: int, extra: int) -> bool:
        return False  # a buddy block has a fixed size: growth means moving, which we refuse

    def free_blocks(self) -> list[tuple[int, int]]:
        """(start, size) of every free buddy block, for tests."""
        return [(s, 1 << o) for o, lst in enumerate(self.lists) for s in lst]
