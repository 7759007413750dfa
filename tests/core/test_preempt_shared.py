"""Preemption counts only the blocks a release really frees: blocks shared with a running
sequence stay held, so vLLM's loop (preempt from the tail until the failed sequence fits)
goes past a victim whose blocks are all shared."""
from __future__ import annotations

import numpy as np

from kvviz.alloc.paged import PagedAllocator
from kvviz.alloc.prefix import PrefixChain
from kvviz.engine.preemption import preempt_from_tail

BS = 4


def test_a_victim_that_frees_nothing_does_not_stop_the_search():
    a = PagedAllocator(6, BS, prefix_caching=True)
    chain = PrefixChain(np.array([7, 8]), BS, 2 * BS)
    assert a.admit(0, 2 * BS, prefix=chain).ok  # A: 2 full blocks, cached
    assert a.admit(1, 4 * BS).ok  # C: 4 blocks of its own; the pool is now full
    assert a.admit(2, 2 * BS, prefix=chain).ok  # B: both its blocks are A's (hits)
    assert a.usage().free_tokens == 0
    ids = np.array([0, 1, 2])
    ok = a.append_batch(ids[:1])  # A needs a new block: none left
    assert not ok[0]
    keep = preempt_from_tail(a, ids, np.array([False, True, True]))
    # releasing B frees nothing (A still holds its blocks), so C goes too and A grows
    assert keep.tolist() == [True, False, False]
    assert (a.seq_allocated_tokens(np.array([0])) // BS).tolist() == [3]
