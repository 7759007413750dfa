"""kvviz's own publisher follows the pool's prefix chains: every stored block names the block
before it in its prompt as parent, however long the prompt (no recursion); it publishes the
block pool's log, so what happens between two samples is published, in order."""
from __future__ import annotations

import numpy as np

from kvviz.core.config import LaneSpec
from kvviz.engine.kvpool import KVPool, Prefix
from kvviz.engine.rule import state as S
from kvviz.node.kvevents.engine_source import LanePublisher, cached_prefix_keys


def cache(blocks: int, chain_block: int = 16) -> KVPool:
    """A paged pool of `blocks` blocks of 16 slots with prefix caching."""
    return KVPool(LaneSpec("paged", 16, prefix_caching=True), blocks * 16,
                  chain_block=chain_block)


class FakePub:
    fmt = "vllm"

    def __init__(self) -> None:
        self.events: list[dict] = []

    def publish(self, events, ts=None) -> None:
        self.events += events


def test_stored_blocks_chain_to_their_prompt_parents_and_evictions_are_removed():
    alloc = cache(512, chain_block=64)
    long_prompt = Prefix(np.arange(1, 129, dtype=np.int64), 8192 - 16)  # 508 blocks
    assert alloc.admit(1, 8192 - 16, prefix=long_prompt).ok
    alloc.release(1)
    keys = cached_prefix_keys(alloc)
    assert len(keys) == (8192 - 16) // 16 and sum(p is None for p in keys.values()) == 1
    pub = FakePub()
    lp = LanePublisher(pub, 16)
    lp.follow(alloc)
    pairs = [(h, e["parent_block_hash"] if i == 0 else e["block_hashes"][i - 1])
             for e in pub.events if e["type"] == "BlockStored"
             for i, h in enumerate(e["block_hashes"])]
    assert len(pairs) == len(keys)
    hashes = {h for h, _ in pairs}
    parents = [p for _, p in pairs]
    assert parents.count(None) == 1 and set(parents) - {None} <= hashes
    assert len(set(parents) - {None}) == len(keys) - 1  # a chain: each block is one's parent
    assert alloc.admit(2, 8192).ok  # fresh content fills the pool: every cached block goes
    lp.follow(alloc)
    removed = [h for e in pub.events if e["type"] == "BlockRemoved" for h in e["block_hashes"]]
    assert set(removed) == hashes


def _blocks(events: list) -> list[tuple[str, int]]:
    return [(e["type"], h) for e in events for h in e.get("block_hashes", [])]


def test_a_block_stored_and_evicted_between_two_samples_is_published_stored_then_removed():
    alloc = cache(4)
    pub = FakePub()
    lp = LanePublisher(pub, 16)
    lp.follow(alloc)  # sample 1: an empty cache, nothing to say
    assert pub.events == []
    shared = Prefix([7], 16)
    assert alloc.admit(1, 16, prefix=shared).ok  # one block of cached content
    (key,) = cached_prefix_keys(alloc)
    alloc.release(1)  # free, still cached
    assert alloc.admit(2, 63).ok  # needs all 4 blocks: the cached one is evicted
    alloc.release(2)
    assert key not in cached_prefix_keys(alloc)  # a look at the pool now misses it
    lp.follow(alloc)  # sample 2
    h = LanePublisher.hash_of(key)
    assert _blocks(pub.events)[:2] == [("BlockStored", h), ("BlockRemoved", h)]
    assert h not in lp.cached_hashes()  # (2's three full blocks are cached since)


def test_no_log_is_kept_while_nobody_publishes():
    alloc = cache(4)
    assert alloc.admit(1, 32, prefix=Prefix([1, 2], 32)).ok
    assert not alloc.pool.c[S.KV_LOG_ON] and alloc.pool.kv_kind.size == 0
    assert alloc.block_pool.drain_log() == []


def test_a_replaced_pool_is_announced_as_cleared_then_published_whole():
    chain = Prefix([5], 16)
    old, new = cache(8), cache(8)
    assert old.admit(1, 16, prefix=chain).ok and new.admit(1, 16, prefix=chain).ok
    pub = FakePub()
    lp = LanePublisher(pub, 16)
    lp.follow(old)
    lp.follow(new)  # a --loop restart: a fresh pool
    assert [e["type"] for e in pub.events] == ["BlockStored", "AllBlocksCleared", "BlockStored"]
    assert lp.cached_hashes() == {LanePublisher.hash_of(k) for k in cached_prefix_keys(new)}
