"""Prefix caching: shared full prompt blocks, cached-free blocks, LRU eviction."""
from __future__ import annotations

import numpy as np

from kvviz.alloc import PagedAllocator, PrefixKey, Reason
from kvviz.core import metrics

P = PrefixKey(0, 8)  # two full blocks of 4


def two_sharing() -> PagedAllocator:
    a = PagedAllocator(16, 4, prefix_caching=True)
    assert a.admit(1, 10, prefix=P).ok  # blocks 0, 1 (prefix) + 2 (2 slots)
    assert a.admit(2, 10, prefix=P).ok  # hits 0, 1 + fresh 3
    return a


def test_same_prefix_shares_full_prefix_blocks():
    a = two_sharing()
    assert a.block_table(1).tolist() == [0, 1, 2]
    assert a.block_table(2).tolist() == [0, 1, 3]
    assert a.snapshot().refcount[:4].tolist() == [2, 2, 1, 1]


def test_shared_blocks_count_once_and_show_as_savings():
    a = two_sharing()
    m = metrics.compute(a.snapshot())
    assert (m.used_tokens, m.shared_savings_tokens) == (12, 8)
    u = a.usage()
    assert (u.used_tokens, u.allocated_tokens) == (12, 16)
    assert a.seq_allocated_tokens(np.array([1, 2])).tolist() == [12, 12]


def test_after_both_release_prefix_blocks_stay_cached_and_free():
    a = two_sharing()
    a.release(1)
    a.release(2)
    bm = a.snapshot()
    assert bm.cached.tolist()[:4] == [True, True, False, False]
    assert (bm.owner == -1).all() and (bm.refcount == 0).all()
    m = metrics.compute(bm)
    assert (m.cached_tokens, m.free_tokens, m.used_tokens) == (8, 64, 0)
    assert a.usage().cached_tokens == 8


def test_a_third_sequence_hits_the_cached_blocks():
    a = two_sharing()
    a.release(1)
    a.release(2)
    assert a.admit(3, 9, prefix=P).ok
    assert a.block_table(3).tolist()[:2] == [0, 1]
    bm = a.snapshot()
    assert not bm.cached.any()
    assert bm.refcount[:2].tolist() == [1, 1]
    assert a.usage().used_tokens == 9


def test_different_groups_do_not_share():
    a = PagedAllocator(16, 4, prefix_caching=True)
    a.admit(1, 8, prefix=PrefixKey(0, 8))
    a.admit(2, 8, prefix=PrefixKey(1, 8))
    assert (a.snapshot().refcount <= 1).all()


def test_only_full_blocks_of_the_prefix_are_shared():
    a = PagedAllocator(16, 4, prefix_caching=True)
    a.admit(1, 10, prefix=PrefixKey(0, 7))  # one full prefix block
    a.admit(2, 10, prefix=PrefixKey(0, 7))
    assert a.snapshot().refcount[:4].tolist() == [2, 1, 1, 1]


def test_without_prefix_caching_nothing_is_shared_or_cached():
    a = PagedAllocator(16, 4)
    a.admit(1, 8, prefix=P)
    a.admit(2, 8, prefix=P)
    a.release(1)
    bm = a.snapshot()
    assert (bm.refcount <= 1).all() and not bm.cached.any()


def test_cached_blocks_are_evicted_oldest_first_when_memory_is_needed():
    a = PagedAllocator(4, 4, prefix_caching=True)
    a.admit(1, 8, prefix=PrefixKey(0, 8))  # blocks 0, 1
    a.admit(2, 8, prefix=PrefixKey(1, 8))  # blocks 2, 3
    a.release(1)
    a.release(2)  # vLLM frees each sequence tail first: LRU 1, 0, 3, 2
    assert a.admit(3, 4).ok
    assert a.usage().evictions == 1
    assert a.block_table(3).tolist() == [1]  # the oldest sequence's tail goes first
    assert a.snapshot().cached.tolist() == [True, False, True, True]
    assert a.admit(4, 8, prefix=PrefixKey(1, 8)).ok  # group 1 still cached: a hit
    assert a.block_table(4).tolist() == [2, 3]
    assert a.usage().evictions == 1


def test_a_hit_refreshes_the_block_in_the_lru():
    a = PagedAllocator(3, 4, prefix_caching=True)
    a.admit(1, 4, prefix=PrefixKey(0, 4))  # block 0
    a.admit(2, 4, prefix=PrefixKey(1, 4))  # block 1
    a.release(1)
    a.release(2)  # LRU: 0, 1
    a.admit(3, 4, prefix=PrefixKey(0, 4))  # hit 0
    a.release(3)  # LRU: 1, 0
    a.admit(4, 8)  # plain block 2 + evict 1
    assert sorted(a.block_table(4).tolist()) == [1, 2]
    assert a.snapshot().cached.tolist() == [True, False, False]


def test_cached_blocks_count_as_free_for_admission():
    a = PagedAllocator(2, 4, prefix_caching=True)
    a.admit(1, 8, prefix=P)
    a.release(1)
    assert a.check(8).ok
    assert a.admit(2, 8).ok
    assert a.usage().evictions == 2
    assert a.admit(3, 1).reason is Reason.CAPACITY


def test_a_prefix_registered_again_after_a_partial_eviction_keeps_the_cache_consistent():
    a = PagedAllocator(8, 4, prefix_caching=True)
    key = PrefixKey(0, 12)
    a.admit(1, 12, prefix=key)  # blocks 0, 1, 2 hold (g0, 0..2)
    a.release(1)  # cached, LRU 0, 1, 2
    a.admit(2, 24)  # five plain blocks + evicts block 0: the chain now misses its head
    a.release(2)
    a.admit(3, 12, prefix=key)  # no hit: registers (g0, 0..2) on fresh blocks
    table3 = a.block_table(3).tolist()
    a.admit(4, 20)  # takes the rest: the stale copies of (g0, 1..2) must go
    a.release(4)
    a.release(3)  # seq 3's blocks are cached now
    assert a.usage().cached_tokens == 12
    assert a.admit(5, 12, prefix=key).ok
    assert a.block_table(5).tolist() == table3  # a full hit on what seq 3 wrote
    a.release(5)
    assert a.admit(6, 32).ok  # evicts everything cached without error
    assert a.usage().cached_tokens == 0


def test_watermark_counts_whole_blocks_when_prefixes_are_given():
    a = PagedAllocator(2, 16, prefix_caching=True)
    k = a.admit_many(np.array([1]), np.array([17]), None, [PrefixKey(0, 16)],
                     keep_free_tokens=10)
    assert k == 0 or a.usage().free_tokens >= 10


def test_a_shared_block_passes_to_its_lowest_holder_left_and_its_entry_goes_with_one_left():
    a = PagedAllocator(16, 4, prefix_caching=True)
    for sid in (5, 3, 9):
        assert a.admit(sid, 10, prefix=P).ok  # blocks 0, 1 shared by all three
    assert a.snapshot().owner[:2].tolist() == [5, 5]
    a.release(5)  # the owner leaves: the lowest holder left owns them
    assert a.snapshot().owner[:2].tolist() == [3, 3]
    assert a.snapshot().refcount[:2].tolist() == [2, 2]
    a.release(3)  # one holder left: no holder set is kept
    assert a.snapshot().owner[:2].tolist() == [9, 9] and a._holders == {}
    assert a.admit(4, 10, prefix=P).ok  # shared again: its holders are 9 and 4 only
    a.release(9)
    assert a.snapshot().owner[:2].tolist() == [4, 4] and a._holders == {}
