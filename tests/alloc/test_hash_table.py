"""The compiled prefix cache's table (cached_block_hash_to_block: open addressing, deletion
by shifting back, duplicates of a hash chained in the order cached) against a dict of lists,
with hashes chosen to collide, run into each other and wrap around the table's end."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kvviz.core.config import LaneSpec
from kvviz.engine.kvpool import KVPool
from kvviz.engine.rule import pool as rule_pool
from tests.examples import examples

NB = 12  # blocks: a table of 32 slots
HASHES = (1, 33, 65, 2, 34, 31, 63, 95)  # home slots 1, 1, 1, 2, 2, 31, 31, 31


def _chain(p, h: int) -> list[int]:
    """The blocks the compiled table holds under h, first cached first."""
    b, out = int(rule_pool.get_cached_block(p, np.uint64(h))), []
    while b >= 0:
        out.append(b)
        b = int(p.dup_next[b])
    return out


@settings(max_examples=examples(150), deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, NB - 1), st.sampled_from(HASHES)),
                max_size=60))
def test_the_table_holds_each_hashs_blocks_in_the_order_cached(ops):
    p = KVPool(LaneSpec("paged", 16, prefix_caching=True), NB * 16).pool
    assert p.hash_keys.size == 32
    ref: dict[int, list[int]] = {}
    hash_of: dict[int, int] = {}
    for store, b, h in ops:
        if store and hash_of.get(b) != h:
            rule_pool.cache_block(p, b, np.uint64(h), 16, np.uint64(0))
            if b in hash_of:
                ref[hash_of[b]].remove(b)
            hash_of[b] = h
            ref.setdefault(h, []).append(b)
        elif not store and b in hash_of:
            rule_pool.forget(p, b)
            ref[hash_of.pop(b)].remove(b)
        assert {h: _chain(p, h) for h in HASHES} == {h: ref.get(h, []) for h in HASHES}
        assert np.count_nonzero(p.hash_keys) == sum(1 for v in ref.values() if v)
        assert sorted(np.flatnonzero(p.block_hash).tolist()) == sorted(hash_of)
