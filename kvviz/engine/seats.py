"""Seats: when each waiting request is admitted if max_num_seqs is the only limit that binds.

The rule (kvviz/engine/scheduler.py) admits waiting requests in order, at most max_num_seqs
running; a request that finishes in step f's update runs through step f and frees its seat
for step f + 1. So while memory and the token budget serve everyone (kvviz/engine/window.py
checks both, and ends its window before the first step where either would bind), request
k is admitted at the first step, no earlier than its arrival and than request k - 1's
admission, at which fewer than max_num_seqs run; it was first asked at the latest of those
two steps, and refused for the seats there (one POLICY admit_failed event) when its
admission comes later.
"""
from __future__ import annotations

from heapq import heapify, heappop, heappush

import numpy as np


def seat_steps(arrive: np.ndarray, running_fin: np.ndarray, lasts: np.ndarray, seats: int,
               after: int) -> tuple[np.ndarray, np.ndarray]:
    """Admission steps in order. arrive: per waiting request, the first step > after that
    sees it; running_fin: the finish step of each request running now; lasts: per waiting
    request, its finish step minus its admission step. Returns (the step each is admitted,
    the step it is first asked)."""
    heap = running_fin.tolist()
    heapify(heap)
    admit, asked = [], []
    prev = after + 1
    for t, d in zip(arrive.tolist(), lasts.tolist()):
        a = t if t > prev else prev
        asked.append(a)
        while heap and heap[0] < a:
            heappop(heap)
        while len(heap) >= seats:  # wait for the next finish
            a = heap[0] + 1
            while heap and heap[0] < a:
                heappop(heap)
        heappush(heap, a + d)
        admit.append(a)
        prev = a
    return np.asarray(admit, np.int64), np.asarray(asked, np.int64)
