"""BlockPool's per-key records kept per block: a key several blocks hold keeps the parent and
the stamp of its first registration while any of its blocks is cached (kvviz/alloc/blockpool.py)."""
from __future__ import annotations

import numpy as np

from kvviz.alloc.blockpool import BlockPool

K, L, M, P1, P2 = (1, 16), (2, 16), (3, 16), (7, 0), (8, 0)


class Chains:
    """A LazyKeys source: request r's block k has the key (100 * r + k, 16 * (k + 1))."""

    def chain(self, r: int, n: int) -> list:
        return [(100 * r + k, 16 * (k + 1)) for k in range(n)]


def pool_with_copy() -> BlockPool:
    """K on block 0 (parent P1), L on block 1, K again on block 2 (parent P2: the first
    registration's stays); all three freed, block 0 first in the LRU."""
    pool = BlockPool(8)
    got = pool.take(3).tolist()
    assert got == [0, 1, 2]
    pool.register_many([K, L, K], got, [P1, None, P2])
    pool.put(np.asarray(got), np.full(3, 16, np.int32))
    return pool


def test_a_key_keeps_its_first_parent_while_a_copy_stays():
    pool = pool_with_copy()
    assert pool._block_of == {K: {0: None, 2: None}, L: {1: None}}
    assert pool.parent_of == {K: P1, L: None}
    plain = pool.free_count - pool.cached_count
    assert pool.take(plain + 1).tolist()[-1] == 0  # evicts block 0: block 2 now holds K
    assert pool._block_of == {K: {2: None}, L: {1: None}}
    assert pool.parent_of == {K: P1, L: None}
    assert pool.cached_keys() == {K: P1, L: None}
    assert pool._key_of == {1: L, 2: K}


def test_a_block_registered_again_under_another_key_forgets_the_old_one():
    pool = BlockPool(4)
    got = pool.take(2).tolist()
    pool.register_many([K, L], got, [None, K])
    pool.register_many([M], [got[1]], [K])  # block 1: L -> M
    assert pool._key_of == {0: K, 1: M}
    assert pool.parent_of == {K: None, M: K}
    assert pool.lookup(L) is None and pool.lookup(M) == 1


def test_cached_run_stops_at_the_first_miss_at_any_position():
    pool = BlockPool(64)
    got = pool.take(40).tolist()
    keys = [(j, 16 * (j + 1)) for j in range(40)]
    pool.register_many(keys, got, [None, *keys[:-1]])
    for n in (0, 1, 15, 16, 17, 31, 32, 33, 40):
        assert pool.cached_run(keys[:n]) == got[:n]
        assert pool.cached_run(iter(keys[:n])) == got[:n]
        for miss in range(n):
            asked = keys[:miss] + [(-1, 0)] + keys[miss + 1:n]
            assert pool.cached_run(asked) == got[:miss], (n, miss)


def test_one_call_registering_a_block_twice_keeps_the_second_key():
    pool = BlockPool(4)
    b = int(pool.take(1)[0])
    pool.register_many([K, L], [b, b], [None, K])
    assert pool._key_of == {b: L} and pool._block_of == {L: {b: None}}
    assert pool.parent_of == {L: K} and pool.lookup(K) is None
