"""kvviz's own publisher follows the allocator's prefix chains: every stored block names the
block before it in its prompt as parent, however long the prompt (no recursion); it publishes
the block pool's log, so what happens between two samples is published, in order."""
from __future__ import annotations

import numpy as np

from kvviz.alloc import PagedAllocator
from kvviz.alloc.prefix import PrefixChain
from kvviz.node.kvevents.engine_source import LanePublisher, cached_prefix_keys


class FakePub:
    fmt = "vllm"

    def __init__(self) -> None:
        self.events: list[dict] = []

    def publish(self, events, ts=None) -> None:
        self.events += events


def test_stored_blocks_chain_to_their_prompt_parents_and_evictions_are_removed():
    alloc = PagedAllocator(512, 16, prefix_caching=True)  # 512 blocks of 16 slots
    long_prompt = PrefixChain(np.arange(1, 129, dtype=np.int64), 64, 8192 - 16)  # 508 blocks
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
    alloc = PagedAllocator(4, 16, prefix_caching=True)  # 4 blocks
    pub = FakePub()
    lp = LanePublisher(pub, 16)
    lp.follow(alloc)  # sample 1: an empty cache, nothing to say
    assert pub.events == []
    shared = PrefixChain(np.asarray([7], np.int64), 16, 16)
    assert alloc.admit(1, 16, prefix=shared).ok  # one block of cached content
    alloc.release(1)  # free, still cached
    assert alloc.admit(2, 64).ok  # needs all 4 blocks: the cached one is evicted
    alloc.release(2)
    assert cached_prefix_keys(alloc) == {}  # a look at the pool now sees nothing
    lp.follow(alloc)  # sample 2
    h = LanePublisher.hash_of((7, 16))
    assert _blocks(pub.events) == [("BlockStored", h), ("BlockRemoved", h)]
    assert lp.cached_hashes() == set()


def test_no_log_is_kept_while_nobody_publishes():
    alloc = PagedAllocator(4, 16, prefix_caching=True)
    assert alloc.admit(1, 32, prefix=PrefixChain(np.asarray([1, 2], np.int64), 16, 32)).ok
    assert alloc._pool.log is None and alloc._pool.drain_log() == []


def test_a_replaced_pool_is_announced_as_cleared_then_published_whole():
    chain = PrefixChain(np.asarray([5], np.int64), 16, 16)
    old, new = (PagedAllocator(8, 16, prefix_caching=True) for _ in range(2))
    assert old.admit(1, 16, prefix=chain).ok and new.admit(1, 16, prefix=chain).ok
    pub = FakePub()
    lp = LanePublisher(pub, 16)
    lp.follow(old)
    lp.follow(new)  # a --loop restart: a fresh allocator
    assert [e["type"] for e in pub.events] == ["BlockStored", "AllBlocksCleared", "BlockStored"]
    assert lp.cached_hashes() == {LanePublisher.hash_of((5, 16))}
