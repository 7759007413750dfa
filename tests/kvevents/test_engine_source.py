"""kvviz's own publisher follows the allocator's prefix chains: every stored block names the
block before it in its prompt as parent, however long the prompt (no recursion)."""
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
    lp.update(keys)
    stored = [e for e in pub.events if e["type"] == "BlockStored"]
    assert len(stored) == len(keys)
    hashes = {e["block_hashes"][0] for e in stored}
    parents = [e["parent_block_hash"] for e in stored]
    assert parents.count(None) == 1 and set(parents) - {None} <= hashes
    assert len(set(parents) - {None}) == len(keys) - 1  # a chain: each block is one's parent
    assert alloc.admit(2, 8192).ok  # fresh content fills the pool: every cached block goes
    lp.update(cached_prefix_keys(alloc))
    removed = [h for e in pub.events if e["type"] == "BlockRemoved" for h in e["block_hashes"]]
    assert set(removed) == hashes
