"""The block pool's event log (what kvviz's KV-event publisher drains): after any operation
sequence, the cached keys at the log's start plus its entries, applied in order, are exactly
the keys cached now; a store names a key not cached yet whose parent is cached (so a subscriber
sees whole chains), and a removal names a cached key."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kvviz.alloc.blockpool import REMOVED
from tests.alloc.ops import CONFIGS, OPS, Runner

PREFIX = [c for c in CONFIGS if c.prefix]


def _keys(pool) -> set:
    return set(pool._block_of)


@settings(max_examples=60, deadline=None)
@given(cfg=st.sampled_from(PREFIX), warmup=OPS, ops=OPS, drain_every=st.integers(1, 5))
def test_the_log_replayed_over_its_start_is_the_cache(cfg, warmup, ops, drain_every):
    r = Runner(cfg)
    for op in warmup:  # the log starts on a pool that already holds a cache
        r.apply(op)
    pool = r.alloc._pool
    cache = set(pool.start_log())
    for i, op in enumerate(ops, 1):
        r.apply(op)
        if i % drain_every == 0 or i == len(ops):
            for kind, key, parent in pool.drain_log():
                if kind == REMOVED:
                    assert key in cache
                    cache.remove(key)
                else:
                    assert key not in cache and (parent is None or parent in cache)
                    cache.add(key)
            assert cache == _keys(pool)
