"""The prefix cache's bookkeeping against plain references: BlockPool's key -> blocks map
(a key several blocks hold, evicted one copy at a time) against a dict of dicts, and
PagedAllocator.cache_many (decode caching in one pass) against cache_blocks one by one."""
from __future__ import annotations

import copy
import pickle

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
