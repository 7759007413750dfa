"""Prefix caching, worked by hand: shared full prompt blocks, cached free blocks, LRU
eviction, and vLLM's rule that the block of a prompt's last token is never a hit."""
from __future__ import annotations

import numpy as np

from kvviz.core import metrics
from kvviz.core.admission import Reason
from kvviz.core.config import LaneSpec
from kvviz.engine.kvpool import KVPool, Prefix


def cache(blocks: int, prefix_caching: bool = True) -> KVPool:
    return KVPool(LaneSpec("paged", 4, prefix_caching=prefix_caching), blocks * 4)


def key(group: int, length: int) -> Prefix:
    """The first `length` tokens are group `group`'s (chain blocks of 4, the block size)."""
    return Prefix([group] * -(-length // 4), length)


P = key(0, 8)  # two full blocks of 4


def two_sharing() -> KVPool:
    a = cache(16)
    assert a.admit(1, 10, prefix=P).ok  # blocks 0, 1 (prefix) + 2 (2 slots)
    assert a.admit(2, 10, prefix=P).ok  # hits 0, 1 + fresh 3
    return a


def test_same_prefix_shares_full_prefix_blocks():
    a = two_sharing()
    assert a.block_table(1).tolist() == [0, 1, 2]
    assert a.block_table(2).tolist() == [0, 1, 3]
    assert a.snapshot().refcount[:4].tolist() == [2, 2, 1, 1]
    assert a.prefix_hit_tokens == 8


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
    assert not bm.cached.any() and bm.refcount[:2].tolist() == [1, 1]
    assert a.usage().used_tokens == 9


def test_the_block_of_the_last_known_token_is_never_a_hit():
    a = cache(16)
    assert a.admit(1, 8, prefix=P).ok
    assert a.admit(2, 8, prefix=P).ok  # vLLM recomputes the last token to sample from it
    assert a.block_table(2).tolist() == [0, 2] and a.prefix_hit_tokens == 4


def test_different_groups_do_not_share():
    a = cache(16)
    a.admit(1, 9, prefix=key(0, 8))
    a.admit(2, 9, prefix=key(1, 8))
    assert (a.snapshot().refcount <= 1).all()


def test_only_full_blocks_of_the_prefix_are_shared():
    a = cache(16)
    a.admit(1, 10, prefix=key(0, 7))  # one full prefix block
    a.admit(2, 10, prefix=key(0, 7))
    assert a.snapshot().refcount[:5].tolist() == [2, 1, 1, 1, 1]


def test_without_prefix_caching_nothing_is_shared_or_cached():
    a = cache(16, prefix_caching=False)
    a.admit(1, 9, prefix=P)
    a.admit(2, 9, prefix=P)
    a.release(1)
    bm = a.snapshot()
    assert (bm.refcount <= 1).all() and not bm.cached.any()


def test_cached_blocks_are_evicted_oldest_first_when_memory_is_needed():
    a = cache(4)
    a.admit(1, 8, prefix=key(0, 8))  # blocks 0, 1
    a.admit(2, 8, prefix=key(1, 8))  # blocks 2, 3
    a.release(1)
    a.release(2)  # vLLM frees each sequence tail first: LRU 1, 0, 3, 2
    assert a.admit(3, 4).ok
    assert a.usage().evictions == 1
    assert a.block_table(3).tolist() == [1]  # the oldest sequence's tail goes first
    assert a.snapshot().cached.tolist() == [True, False, True, True]
    assert a.admit(4, 9, prefix=key(1, 8)).ok  # group 1 still cached: hits 2, 3
    assert a.block_table(4).tolist() == [2, 3, 0]  # and the LRU's head for its own token
    assert a.usage().evictions == 2


def test_a_hit_refreshes_the_block_in_the_lru():
    a = cache(3)
    a.admit(1, 4, prefix=key(0, 4))  # block 0
    a.admit(2, 4, prefix=key(1, 4))  # block 1
    a.release(1)
    a.release(2)  # LRU: 0, 1
    a.admit(3, 5, prefix=key(0, 4))  # hit 0, plain block 2
    a.release(3)  # LRU: 1, 0
    a.admit(4, 8)  # plain block 2 + evicts 1
    assert a.block_table(4).tolist() == [2, 1]
    assert a.snapshot().cached.tolist() == [True, False, False]


def test_cached_blocks_count_as_free_for_admission():
    a = cache(2)
    a.admit(1, 8, prefix=P)
    a.release(1)
    assert a.check(8).ok
    assert a.admit(2, 8).ok
    assert a.usage().evictions == 2
    assert a.admit(3, 1).reason is Reason.CAPACITY


def test_a_chain_cached_again_after_its_tail_was_evicted_is_whole_again():
    a = cache(8)
    k = key(0, 12)
    a.admit(1, 13, prefix=k)  # blocks 0, 1, 2 hold the chain, 3 one token
    a.release(1)  # LRU 2, 1, 0
    a.admit(2, 24)  # the five plain blocks, then evicts block 2: the chain's tail
    a.release(2)
    a.admit(3, 13, prefix=k)  # hits 0, 1 only; the chain's third block is written again
    assert a.block_table(3).tolist()[:2] == [0, 1] and a.prefix_hit_tokens == 8
    a.release(3)
    assert a.admit(4, 13, prefix=k).ok
    assert a.prefix_hit_tokens == 8 + 12


def test_a_shared_block_passes_to_the_holder_admitted_first_of_those_left():
    a = cache(16)
    for sid in (5, 9, 3):
        assert a.admit(sid, 10, prefix=P).ok  # blocks 0, 1 shared by all three
    assert a.snapshot().owner[:2].tolist() == [5, 5]
    a.release(5)  # the owner leaves: 9 was admitted before 3
    assert a.snapshot().owner[:2].tolist() == [9, 9]
    assert a.snapshot().refcount[:2].tolist() == [2, 2]
    a.release(9)
    assert a.snapshot().owner[:2].tolist() == [3, 3]
    assert a.admit(4, 10, prefix=P).ok
    a.release(3)
    assert a.snapshot().owner[:2].tolist() == [4, 4]
