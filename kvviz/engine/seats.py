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

from heapq import heapify, heappop, heappush, heapreplace
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from kvviz.engine.lane import Lane

EMPTY = np.zeros(0, np.int64)


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
        if len(heap) >= seats:  # all seats taken (never more): wait for the next finish
            f = heap[0]
            a = f + 1
            heapreplace(heap, a + d)
            while heap[0] <= f:  # others finishing with it (a + d > f stays)
                heappop(heap)
        else:
            heappush(heap, a + d)
        admit.append(a)
        prev = a
    return np.asarray(admit, np.int64), np.asarray(asked, np.int64)


def seat_refusals(lane: Lane, ye: np.ndarray, n: int, steps: np.ndarray,
                  asked: np.ndarray, running, p: np.ndarray, end: int):
    """The heads that wait for a seat by step `end`: (the last step the window may take,
    (steps, requests) of their POLICY admit_failed events, (steps, requests) of every
    wait). Each waiting head is refused at every step until its seat, for POLICY while the
    free blocks cover it (windowplan.Plan.memory checks), with an event where it is first
    refused unless that refusal was the last one logged; an event needs budget left when
    the head is asked (else it is not asked)."""
    sched = lane.sched
    k = np.flatnonzero(asked[:n] < np.concatenate([steps, [end + 1]])[:n])
    k = k[asked[k] <= end]
    waits = (asked[k], ye[k])
    if k.size and lane.last_fail == (int(ye[0]), "POLICY"):
        k = k[k > 0]  # the head at the start was refused for a seat already
    if not k.size:
        return end, (EMPTY, EMPTY), waits
    t = asked[k]
    ps = np.concatenate([[0], np.cumsum(p)])
    left = sched.budget_after_decodes(running(t)) - (
        ps[np.searchsorted(steps, t, "right")] - ps[np.searchsorted(steps, t, "left")])
    if (left <= 0).any():
        end = min(end, int(t[np.argmax(left <= 0)]) - 1)
    return end, (t, ye[k]), waits
