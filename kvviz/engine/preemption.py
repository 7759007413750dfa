"""Who is preempted when running sequences cannot grow (recompute preemption).

vLLM's order: the latest-admitted sequences go first, one at a time, until the sequence that
failed (earliest first) can append. Victims are released here; the lane requeues them.
"""
from __future__ import annotations

import numpy as np

from kvviz.alloc.base import Allocator


def preempt_from_tail(alloc: Allocator, ids: np.ndarray, ok: np.ndarray) -> np.ndarray:
    """Free memory for sequences whose append failed by preempting the latest-admitted
    sequences (as vLLM does), retrying each failed one, earliest first.

    Returns the mask of sequences that keep running; the others are released. A victim
    that had appended this step loses that token too (recompute).
    """
    if not alloc.contiguous:
        return _preempt_suffix(alloc, ids, ok)
    state = np.where(ok, 0, 1)  # 0 running, 1 failed, 2 preempted
    tail = ids.size - 1
    for first in np.flatnonzero(~ok).tolist():
        if state[first] == 2:
            continue
        while True:
            while tail > first and state[tail] == 2:
                tail -= 1
            if tail <= first:  # nobody later to preempt: it goes itself
                state[first] = 2
                alloc.release(int(ids[first]))
                break
            state[tail] = 2
            alloc.release(int(ids[tail]))
            tail -= 1
            if alloc.append(int(ids[first])).ok:
                state[first] = 0
                break
    return state == 0


def _preempt_suffix(alloc: Allocator, ids: np.ndarray, ok: np.ndarray) -> np.ndarray:
    """Paged form of preempt_from_tail: any freed block serves, so the victims are the
    shortest suffix of the running list whose blocks cover one block for each failed
    sequence before it. A retry that still fails (copy-on-write can need two blocks)
    preempts that sequence too."""
    failed = ~ok
    if getattr(alloc, "_sharing", False):
        cut = _release_until_enough(alloc, ids, failed)
    else:  # every held block is the sequence's own: releasing it frees them all
        need = np.cumsum(failed) - failed  # failed sequences before position c
        held = alloc.seq_allocated_tokens(ids) // alloc.block_size
        freed = np.cumsum(held[::-1])[::-1]  # freed[c]: blocks held by positions >= c
        fits = np.flatnonzero(freed >= need)
        cut = int(fits[-1]) if fits.size else 0
        alloc.release_many(ids[cut:])
    keep = np.zeros(ids.size, np.bool_)
    keep[:cut] = True
    retry = np.flatnonzero(failed[:cut])
    if retry.size:
        again = alloc.append_batch(ids[retry])
        if not again.all():
            lost = retry[~again]
            alloc.release_many(ids[lost])
            keep[lost] = False
    return keep


def _release_until_enough(alloc: Allocator, ids: np.ndarray, failed: np.ndarray) -> int:
    """Blocks shared with others (prefix hits, forks) stay held when one holder goes, so
    count what a release really frees: preempt from the tail one sequence at a time until
    the free blocks cover the failed sequences before the cut (vLLM's loop). Returns the
    cut: positions >= cut were released."""
    before = np.concatenate([[0], np.cumsum(failed)]).tolist()  # failed in positions < c
    cut = ids.size
    while cut > 0 and alloc.usage().free_tokens // alloc.block_size < before[cut]:
        cut -= 1
        alloc.release(int(ids[cut]))
    return cut
