"""freequeue.replay against the free queue walked event by event (a list stack, a FIFO)."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kvviz.alloc.freequeue import replay, resolve


def walked(stack0: list, fifo: list, d: list, ref: list):
    """The plain way: a take pops the stack, else evicts the FIFO's head; a push pushes."""
    stack, q, got, from_fifo = list(stack0), list(fifo), [], []
    for di, r in zip(d, ref):
        if di > 0:
            stack.append(r)
        elif stack:
            got.append(stack.pop())
            from_fifo.append(False)
        else:
            got.append(q.pop(0))
            from_fifo.append(True)
    return got, from_fifo, stack, len(fifo) - len(q)


@st.composite
def streams(draw):
    """A stack and a FIFO of known blocks (~b), then takes and pushes in which no take finds
    both empty; a push returns a block taken earlier (a reference to its take)."""
    n_stack, n_fifo = draw(st.integers(0, 12)), draw(st.integers(0, 6))
    stack0 = [~b for b in range(n_stack)]
    fifo = [~b for b in range(n_stack, n_stack + n_fifo)]
    d, ref, held, depth, left = [], [], [], n_stack, n_fifo
    takes = 0
    for _ in range(draw(st.integers(0, 80))):
        if held and draw(st.booleans()):
            j = draw(st.integers(0, len(held) - 1))
            d.append(1)
            ref.append(held.pop(j))
            depth += 1
        elif depth or left:
            d.append(-1)
            ref.append(0)
            held.append(takes)
            takes += 1
            if depth:
                depth -= 1
            else:
                left -= 1
    return stack0, fifo, d, ref


@settings(max_examples=400, deadline=None)
@given(streams())
def test_replay_equals_the_walked_queue(stream):
    stack0, fifo, d, ref = stream
    r = replay(np.asarray(stack0, np.int64), np.asarray(fifo, np.int64),
               np.asarray(d, np.int64), np.asarray(ref, np.int64))
    got, from_fifo, stack, used = walked(stack0, fifo, d, ref)
    assert r.src.tolist() == got  # references: ~b for a block known before, j for take j's
    assert r.fifo_take.tolist() == from_fifo
    assert r.fifo_used == used
    assert r.stack.tolist() == stack
    if got:  # and every reference resolves to the block the walk handed out
        blocks = resolve(r.src)
        assert all(blocks[i] == (~g if g < 0 else blocks[g]) for i, g in enumerate(got))
