"""replay_runs (kvviz/alloc/freequeue.py), both ways (the walk over runs and the sort by
level), takes what a stack over a FIFO, popped and pushed one entry at a time, gives."""
from __future__ import annotations

import random
from collections import deque

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kvviz.alloc.freequeue import replay_runs


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 10**6), st.booleans())
def test_replayed_runs_take_what_a_stack_over_a_fifo_gives(seed, loop):
    rnd = random.Random(seed)
    s0, nfifo = rnd.randint(0, 6), rnd.randint(0, 6)
    fifo_at = 1000
    stack, fifo = list(range(s0)), deque(range(fifo_at, fifo_at + nfifo))
    nxt = s0  # pushed ranges mostly follow each other (a window's releases do): they merge
    pop, lo, n, got, from_fifo = [], [], [], [], []
    for _ in range(rnd.randint(0, 12)):
        m = rnd.randint(0, len(stack) + len(fifo))
        for _ in range(m):
            from_fifo.append(not stack)
            got.append(stack.pop() if stack else fifo.popleft())
        k = rnd.choice([0, 1, 2, 3, 5])
        nxt += rnd.choice([0, 0, 0, 4])  # now and then a gap: a range of its own
        pop.append(m)
        lo.append(nxt)
        n.append(k)
        stack.extend(range(nxt, nxt + k))
        nxt += k
    rr = replay_runs(s0, np.asarray(pop, np.int64), np.asarray(lo, np.int64),
                     np.asarray(n, np.int64), fifo_at, nfifo, loop=loop)
    assert rr.got.tolist() == got
    assert rr.stack.tolist() == stack
    if any(from_fifo):
        assert rr.fifo_take.tolist() == from_fifo
    else:
        assert rr.fifo_take is None


def test_the_walk_is_chosen_for_long_runs_and_the_sort_for_short_ones():
    # one run of 100 pushes, then 100 takes: both ways agree, whichever is picked
    pop, lo, n = (np.asarray(x, np.int64) for x in ([0, 100], [0, 0], [100, 0]))
    a = replay_runs(0, pop, lo, n, 100, 0)
    b = replay_runs(0, pop, lo, n, 100, 0, loop=False)
    assert a.got.tolist() == b.got.tolist() == list(range(99, -1, -1))
    assert a.stack.size == b.stack.size == 0
