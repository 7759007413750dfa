"""Stable orders of small non-negative integer keys.

numpy sorts 8- and 16-bit integers stably by radix sort (O(n)); wider keys go through a
comparison sort several times slower. The replays in kvviz/alloc group tens of thousands of
events by keys that nearly always fit 16 bits (a sequence's index in a window, a stack level
above the lowest one touched), so they ask for their order here.
"""
from __future__ import annotations

import numpy as np

U16 = 1 << 16


def stable_order(key: np.ndarray, lo: int | None = None, hi: int | None = None
                 ) -> np.ndarray:
    """np.argsort(key, kind="stable") for integer keys, all in [lo, hi] (each found when not
    given): by radix sort when the range fits 16 bits."""
    key = np.asarray(key)
    if key.size == 0:
        return np.zeros(0, np.intp)
    lo = int(key.min()) if lo is None else lo
    hi = int(key.max()) if hi is None else hi
    if hi - lo < U16:
        return np.argsort((key - lo if lo else key).astype(np.uint16), kind="stable")
    return np.argsort(key, kind="stable")
