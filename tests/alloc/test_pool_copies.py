"""The prefix cache's bookkeeping against plain references: BlockPool's key -> blocks map
(a key several blocks hold, evicted one copy at a time) against a dict of dicts, and
PagedAllocator.cache_many (decode caching in one pass) against cache_blocks one by one."""
from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvviz.alloc.base import PrefixKey
from kvviz.alloc.blockpool import BlockPool
from kvviz.alloc.paged import PagedAllocator
from tests.alloc.invariants import state

NB = 12


@settings(max_examples=200, deadline=None)
@given(ops=st.lists(st.tuples(st.booleans(), st.integers(0, NB - 1), st.integers(0, 3)),
                    max_size=60))
def test_copies_of_a_key_stay_in_the_order_cached(ops):
    """register / forget in any order: every key's blocks (first cached first), the keys in
    the order stored, each block's key, the parents and every lookup are the reference's."""
    pool = BlockPool(NB)
    ref: dict = {}  # key -> {block: None}, first cached first; keys in the order stored
    kof: dict = {}
    par: dict = {}
    for store, b, k in ops:
        key = (k, 16)
        old = kof.get(b)
        if store and old != key:
            if old is not None:
                _ref_forget(ref, kof, par, b)
            pool.register(key, b, (k - 1, 16) if k else None)
            par.setdefault(key, (k - 1, 16) if k else None)
            kof[b] = key
            ref.setdefault(key, {})[b] = None
        elif not store and old is not None:
            pool._forget(b)
            _ref_forget(ref, kof, par, b)
        assert [(x, list(v)) for x, v in pool._block_of.items()] == \
            [(x, list(v)) for x, v in ref.items()]
        assert pool._key_of == kof and pool.parent_of == par
        keys = [(j, 16) for j in range(4)]
        run = []
        for x in keys:
            if x not in ref:
                break
            run.append(next(iter(ref[x])))
        assert pool.cached_run(keys) == run == pool.lookup_run(keys)
        assert [pool.lookup(x) for x in keys] == [next(iter(ref[x])) if x in ref else None
                                                  for x in keys]


def _ref_forget(ref, kof, par, b):
    key = kof.pop(b)
    del ref[key][b]
    if not ref[key]:
        del ref[key]
        par.pop(key, None)


def _keys(r: int, n: int) -> list:
    """Keys of r's first n blocks: the first two shared by every request, then its own."""
    return [((-1, k) if k < 2 else (r, k), 16 * (k + 1)) for k in range(n)]


def _twin(lens: list[int]) -> PagedAllocator:
    a = PagedAllocator(64, 16, prefix_caching=True)
    for r, n in enumerate(lens):
        a.grow_to(r, n)
    return a


@settings(max_examples=100, deadline=None)
@given(lens=st.lists(st.integers(1, 120), min_size=1, max_size=5), data=st.data())
def test_cache_many_is_cache_blocks_in_order(lens, data):
    """Entries (r, n) in any order, a request again with more blocks, some cached before:
    one pass registers what cache_blocks one by one does, in the same order."""
    full = [n // 16 for n in lens]
    pre = [data.draw(st.integers(0, f)) for f in full]
    entries = data.draw(st.lists(st.tuples(st.integers(0, len(lens) - 1), st.integers(0, 8)),
                                 max_size=12))
    entries = [(r, min(k, full[r])) for r, k in entries]
    if data.draw(st.booleans()):  # the next block of each, as a decode step fills them
        entries = [(r, min(pre[r] + 1, full[r])) for r in sorted({r for r, _ in entries})]
    once = len({r for r, _ in entries}) == len(entries)  # each request once: decode_many's
    a, b, c = _twin(lens), _twin(lens), _twin(lens)
    for x in (a, b, c):
        for r, n in enumerate(pre):
            x.cache_blocks(r, _keys(r, n), n)
    for r, n in entries:
        a.cache_blocks(r, _keys(r, n), n)
    if entries:
        ids, ns = (np.asarray(v, np.int64) for v in zip(*entries))
        b.cache_many(ids, ns, _keys)
        c.cache_many(ids, ns, _keys, once=once)
    for x in (b, c):
        pa, pb = a.block_pool, x.block_pool
        assert [(k, list(v)) for k, v in pa._block_of.items()] == \
            [(k, list(v)) for k, v in pb._block_of.items()]
        assert pa._key_of == pb._key_of and pa.parent_of == pb.parent_of
        assert np.array_equal(a._ncached, x._ncached)


@pytest.mark.parametrize("how", ["deepcopy", "pickle"])
def test_a_copied_allocator_reads_its_own_cache_marks(how):
    """A copy of a prefix-caching allocator decides from its own state: the pool's byte
    arrays and their numpy views (the LRU's marks, the blocks holding keys) stay one object
    each in the copy, and the original is untouched by what the copy does. (Hypothesis
    found a copy whose is_cached read marks its view no longer wrote: an admission that
    fits in the original was refused in the copy.)"""
    a = PagedAllocator(10, 1, prefix_caching=True)
    assert a.admit(0, 8, None, PrefixKey(0, 7)).ok
    a.release(0)  # 7 keyed blocks wait in the LRU, 3 plain ones on the stack
    c = copy.deepcopy(a) if how == "deepcopy" else pickle.loads(pickle.dumps(a))
    before = state(a)
    for alloc in (c, a) if how == "deepcopy" else (c,):
        assert alloc.admit(1, 8, 8, PrefixKey(0, 7)).ok  # 7 hits out of the LRU, 1 fresh
    want = a.admit(2, 7, 9, PrefixKey(0, 7)) if how == "deepcopy" else None
    got = c.admit(2, 7, 9, PrefixKey(0, 7))
    assert got.ok, got  # it shares the 7 live hits and takes the 2 free blocks left
    if want is not None:
        assert got == want and state(c) == state(a)
    else:
        assert state(a) == before
