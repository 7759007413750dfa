"""The block pool's event log (what kvviz's KV-event publisher drains, PoolLog), as vLLM
emits it: one BlockStored per block that becomes cached and one BlockRemoved per evicted
block, duplicates of a hash included. After any operation sequence, the blocks cached at the
log's start plus its entries, applied in order, are the blocks cached now, key by key; a
store's parent is cached when it is stored (a subscriber sees whole chains) and a removal
names a cached key."""
from __future__ import annotations

from collections import Counter

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kvviz.engine.kvpool import KVPool
from kvviz.engine.rule.view import REMOVED
from tests.alloc.ops import CHURN, CONFIGS, OPS, Runner
from tests.examples import examples

PREFIX = [c for c in CONFIGS if c.prefix]


def cached_blocks(pool: KVPool) -> Counter:
    """How many blocks hold each key now (held or free)."""
    p = pool.pool
    held = np.flatnonzero(p.block_hash)
    keys = zip(p.block_hash[held].view(np.int64).tolist(), p.block_end[held].tolist())
    return Counter(keys)


@settings(max_examples=examples(60), deadline=None)
@given(cfg=st.sampled_from(PREFIX), warmup=OPS, ops=OPS | CHURN, drain_every=st.integers(1, 5))
def test_the_log_replayed_over_its_start_is_the_cache(cfg, warmup, ops, drain_every):
    r = Runner(cfg)
    for op in warmup:  # the log starts on a pool that already holds a cache
        r.apply(op)
    log = r.pool.block_pool
    assert set(log.start_log()) == set(cached_blocks(r.pool))
    cache = cached_blocks(r.pool)
    for i, op in enumerate(ops, 1):
        r.apply(op)
        if i % drain_every == 0 or i == len(ops):
            for kind, key, parent in log.drain_log():
                if kind == REMOVED:
                    assert cache[key] > 0
                    cache[key] -= 1
                else:
                    assert parent is None or cache[parent] > 0
                    cache[key] += 1
            assert +cache == cached_blocks(r.pool)
