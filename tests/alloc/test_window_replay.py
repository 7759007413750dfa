"""A window's replay (PagedAllocator.replay_window, kvviz/alloc/freequeue.py, lazykeys.py)
leaves exactly what the verbs one by one leave: block tables, owners, the free queue in its
order, the prefix cache's dicts in their order (keys stored lazily computed when read), and
the rows; with repeated keys (the dicts' order needs every store in turn) and with a
request stored lazily that comes back."""
from __future__ import annotations

import random
from collections import deque

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvviz.alloc import PagedAllocator
from kvviz.alloc.freequeue import blocks_of, replay, resolve
from kvviz.alloc.paged_window import ADMIT, FILL, FREE_SEQ, TAKE, lives
from kvviz.alloc.rows import RowTable
from kvviz.core.workload import Workload
from kvviz.engine.tokens import BlockKeys


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 10**6))
def test_the_closed_form_free_queue_is_a_deque(seed):
    rnd = random.Random(seed)
    ids = list(range(rnd.randint(1, 12)))
    rnd.shuffle(ids)
    k = rnd.randint(0, len(ids))
    stack, fifo = ids[:k], deque(ids[k:])
    d, ref, fifo_refs = [], [], [~b for b in fifo]
    taken, held = [], []  # (reference, block) of blocks taken and not freed
    for _ in range(rnd.randint(0, 40)):
        if (stack or fifo) and (not held or rnd.random() < 0.5):
            b = stack.pop() if stack else fifo.popleft()
            held.append((len(taken), b))
            taken.append(b)
            d.append(-1)
            ref.append(0)
        elif held:
            r, b = held.pop(rnd.randrange(len(held)))
            if rnd.random() < 0.5:
                stack.append(b)
                d.append(1)
                ref.append(r)
            else:
                fifo.append(b)
                fifo_refs.append(r)
    a = np.asarray
    rp = replay(a([~b for b in ids[:k]], np.int64), a(fifo_refs, np.int64), a(d, np.int64),
                a(ref, np.int64))
    got = resolve(rp.src)
    assert got.tolist() == taken
    assert blocks_of(rp.stack, got).tolist() == stack
    assert blocks_of(a(fifo_refs[rp.fifo_used:], np.int64), got).tolist() == list(fifo)


def _ops(rnd: random.Random, seqs: list[int], prompt: dict, final: dict, bs: int) -> list:
    """A window's ops for sequences admitted with their prompt, decoding to `final` slots
    and freed, interleaved at random (each sequence's own ops in order)."""
    own = {}
    for r in seqs:
        x = [(ADMIT, r, prompt[r])]
        for n in range(prompt[r], final[r]):  # the decode writing slot n
            if n % bs == 0:
                x.append((TAKE, r, 1))
            if (n + 1) % bs == 0:
                x.append((FILL, r, (n + 1) // bs - 1))
        x.append((FREE_SEQ, r, final[r]))
        own[r] = deque(x)
    out = []
    while own:
        r = rnd.choice(sorted(own))
        out.append(own[r].popleft())
        if not own[r]:
            del own[r]
    return out


def _one_by_one(a: PagedAllocator, ops: list, keys) -> tuple[list[int], list[int]]:
    """The verbs: grow_to to the slot each op implies, cache_blocks for the keys, release.
    Returns what replay_window returns: the free blocks after each ADMIT, per evicted block
    the op that evicted it."""
    bs, after, evicted = a.block_size, [], []
    for i, (k, r, n) in enumerate(ops):
        ev0 = a._pool.evictions
        if k == ADMIT:
            a.grow_to(r, n)
            if n >= bs:
                a.cache_blocks(r, keys(r), n // bs)
        elif k == TAKE:  # the decode writing the first slot of a new block
            a.grow_to(r, a.block_table(r).size * bs + 1)
        elif k == FILL:  # the decode writing the last slot of block n
            a.grow_to(r, (n + 1) * bs)
            a.cache_blocks(r, keys(r), n + 1)
        else:
            a.grow_to(r, n)
            a.release(r)
        if k == ADMIT:
            after.append(a._pool.free_count)
        evicted += [i] * (a._pool.evictions - ev0)
    return after, evicted


def _state(a: PagedAllocator) -> tuple:
    pool, rows = a._pool, a._rows
    return (pool.plain_list(), list(pool._lru), dict(pool._key_of),
            [(k, list(v)) for k, v in pool._block_of.items()], dict(pool.parent_of),
            pool.evictions, pool.content.tolist(), pool.cached.tolist(),
            a._owner.tolist(), a._ref.tolist(), rows._free_rows, rows.seq_of_row.tolist(),
            a.usage(), [(int(r), a.block_table(int(r)).tolist())
                        for r in np.flatnonzero(rows.row_of_seq >= 0)])


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 10**6), st.booleans(), st.booleans(), st.booleans(), st.booleans())
def test_a_replayed_window_leaves_what_the_verbs_leave(seed, lazy, repeat, look, few_rows):
    rnd = random.Random(seed)
    bs, n = rnd.choice([1, 2, 4]), 12
    prompt = np.array([rnd.randint(1, 12) for _ in range(n)], np.int64)
    output = np.array([rnd.randint(1, 12) for _ in range(n)], np.int64)
    w = Workload(np.zeros(n), prompt, output, np.full(n, -1, np.int64))
    final = {r: int(prompt[r] + output[r] - 1) for r in range(n)}
    p = {r: int(prompt[r]) for r in range(n)}
    bk_one, bk_win = BlockKeys(w, bs), BlockKeys(w, bs)

    def plain(r: int, bk=bk_one) -> list:
        if repeat:  # requests 2k and 2k + 1 name the same content: repeated keys
            return [(r // 2, (j + 1) * bs) for j in range(final[r] // bs + 1)]
        return bk.upto(r, final[r] // bs + 1)

    def lazy_keys(r: int):
        return bk_win.keys(r, final[r] // bs + 1)

    need = sum(-(-final[r] // bs) for r in range(n))
    blocks = max(4, need // rnd.choice([1, 2, 3]))  # small pools evict cached blocks
    one, win = (PagedAllocator(blocks, bs, prefix_caching=True) for _ in range(2))
    if few_rows:  # the free rows run out inside the window: they grow on the way
        one._rows, win._rows = RowTable(2), RowTable(2)
    warm = [(ADMIT, r, p[r]) for r in (0, 1)]  # live into the first window
    _one_by_one(one, warm, plain)
    _one_by_one(win, warm, lambda r: plain(r, bk_win))
    ops = _ops(rnd, [2, 3, 4, 5], p, final, bs)
    for r in (0, 1):  # they decode in the window, then go
        for m in range(p[r], final[r]):
            if m % bs == 0:
                ops.append((TAKE, r, 1))
            if (m + 1) % bs == 0:
                ops.append((FILL, r, (m + 1) // bs - 1))
        ops.append((FREE_SEQ, r, final[r]))
    # the second window admits 2 and 3 again (their keys stored lazily in the first)
    for i, window in enumerate((ops, _ops(rnd, [6, 7, 8, 2, 3], p, final, bs))):
        try:
            want = _one_by_one(one, window, plain)
        except (ValueError, IndexError, KeyError):
            return  # the pool is too small for this order: no window would replay it
        kind, seq, arg = (np.asarray(x, np.int64) for x in zip(*window))
        keys = lazy_keys if lazy and not repeat else (lambda r: plain(r, bk_win))
        assert win.replay_window(kind, seq, arg, np.zeros(0, np.int64), np.zeros(0, np.int64),
                                 keys) == want
        if look or i:  # reading the dicts computes the lazy keys: not always in between
            assert _state(win) == _state(one)


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 10**6), st.booleans())
def test_a_request_freed_and_admitted_again_in_one_window(seed, few_rows):
    """A pressure walk (kvviz/engine/walk.py) preempts a request and re-admits it in the same
    window: each life has its own table and row, as the verbs one by one leave them."""
    rnd = random.Random(seed)
    bs, n = rnd.choice([1, 2, 4]), 6
    prompt = {r: rnd.randint(1, 10) for r in range(n)}
    final = {r: prompt[r] + rnd.randint(0, 10) for r in range(n)}
    one, win = (PagedAllocator(400, bs) for _ in range(2))
    if few_rows:
        one._rows, win._rows = RowTable(2), RowTable(2)
    def verbs(a: PagedAllocator, ops: list) -> list[int]:  # no prefix caching: no keys
        after = []
        for k, r, m in ops:
            if k == ADMIT:
                a.grow_to(r, m)
                after.append(a._pool.free_count)
            elif k == TAKE:
                a.grow_to(r, a.block_table(r).size * bs + 1)
            else:
                a.grow_to(r, m)
                a.release(r)
        return after

    warm = [(ADMIT, r, prompt[r]) for r in (0, 1)]
    for a in (one, win):
        verbs(a, warm)
    ops = []
    for _ in range(3):  # every request lives up to three times
        chunk = _ops(rnd, [r for r in range(2, n) if rnd.random() < 0.8], prompt, final, bs)
        ops += [x for x in chunk if x[0] != FILL]
    for r in (0, 1):  # preempted and admitted again, or decoding on from before
        if rnd.random() < 0.5:
            ops.append((FREE_SEQ, r, prompt[r]))
            ops += [x for x in _ops(rnd, [r], prompt, final, bs) if x[0] != FILL]
        else:
            ops += [(TAKE, r, 1) for m in range(prompt[r], final[r]) if m % bs == 0]
            ops.append((FREE_SEQ, r, final[r]))
    # some requests are still running at the window's end: their last release dropped
    last = {r: i for i, (k, r, _) in enumerate(ops) if k == FREE_SEQ}
    drop = {i for r, i in last.items() if rnd.random() < 0.4}
    ops = [x for i, x in enumerate(ops) if i not in drop]
    want = verbs(one, ops)
    live = np.flatnonzero(one._rows.row_of_seq >= 0)
    live_len = np.asarray([one.seq_len(int(r)) for r in live], np.int64)
    kind, seq, arg = (np.asarray(x, np.int64) for x in zip(*ops))
    assert win.replay_window(kind, seq, arg, live, live_len, None) == (want, [])
    assert _state(win) == _state(one)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 5)), max_size=60))
def test_lives_groups_ops_as_unique_over_sequence_and_count(ops):
    kind = np.asarray([k for k, _ in ops], np.int64)
    seq = np.asarray([q for _, q in ops], np.int64)
    first_op, inv, by_life, start = lives(kind, seq)
    # a life: (sequence, the ADMITs of it at or before the op)
    count = [sum(1 for k, q in ops[:i + 1] if q == seq[i] and k == ADMIT) for i in range(len(ops))]
    if ops:
        _, f, i = np.unique(seq * 100 + np.asarray(count), return_index=True,
                            return_inverse=True)
        assert first_op.tolist() == f.tolist() and inv.tolist() == i.tolist()
        assert by_life.tolist() == np.argsort(i, kind="stable").tolist()
        assert start.tolist() == np.searchsorted(np.sort(i), np.arange(f.size)).tolist()
    else:
        assert first_op.size == inv.size == by_life.size == start.size == 0


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 1 << 30), min_size=1, max_size=300))
def test_resolve_follows_every_chain_and_refuses_a_cycle(draws):
    # take j refers to a known block (~b) or to an earlier take, chains as long as they come
    src = [~(draws[0] % 50)] + [(x % j) if x % 3 else ~(x % 50) for j, x in
                                enumerate(draws[1:], 1)]
    want = []
    for r in src:
        want.append(~r if r < 0 else want[r])
    assert resolve(np.asarray(src, np.int64)).tolist() == want
    chain = np.arange(-1, len(src) - 1)  # the longest: each take refers to the one before
    chain[0] = ~3
    assert (resolve(chain) == 3).all()
    chain[0] = len(src) - 1  # the first take refers to the last: no block ends it
    with pytest.raises(ValueError, match="cycle"):
        resolve(chain)
