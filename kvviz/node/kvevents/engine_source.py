"""kvviz's engine as a KV-event source: its paged lanes' prefix caches -> BlockStored /
BlockRemoved, published like a vLLM node (lane k of the paged prefix lanes = DP rank k,
port + k).

Events are the difference between two looks at a lane's cached prefix blocks (taken at each
sample): blocks that became cached are stored, blocks that left the cache were evicted. Blocks
stored and evicted between two samples are not seen. The only look into the allocator is
`cached_prefix_keys`; everything else works on its keys.
"""
from __future__ import annotations

import hashlib
from collections.abc import Callable

from kvviz.node.kvevents.endpoints import endpoint_for_rank
from kvviz.node.kvevents.publisher import Publisher, removed, stored

Key = tuple[int, int]  # (content id of the prompt up to `end`, end): kvviz.alloc.prefix
VOCAB = 32_000


def cached_prefix_keys(alloc) -> dict[Key, Key | None]:
    """The prefix blocks a paged allocator holds as cached content (live or free), each with
    the key of the block before it in its prompt (None for a prompt's first block)."""
    pool = getattr(alloc, "_pool", None)
    if pool is None:
        return {}
    parents = getattr(pool, "parent_of", {})
    return {k: parents.get(k) for k in getattr(pool, "_block_of", ())}


def block_hash(parent: int | None, key: Key) -> int:
    """A 64-bit hash of a block's content (and of `parent`'s hash, when given)."""
    h = hashlib.blake2b(digest_size=8)
    h.update((parent or 0).to_bytes(8, "big"))
    h.update(key[0].to_bytes(8, "big", signed=True) + key[1].to_bytes(8, "big"))
    return int.from_bytes(h.digest(), "big")


def synthetic_tokens(key: Key, block_size: int) -> list[int]:
    """Token ids for block `key` (content id, end): the same for every request whose prompt
    has that content (loads have no token ids)."""
    base = key[0] * 7919 + key[1]
    return [(base + j) % VOCAB for j in range(block_size)]


class LanePublisher:
    """Diffs one lane's cached prefix blocks against the previous look and publishes."""

    def __init__(self, pub: Publisher, block_size: int) -> None:
        self.pub, self.block_size = pub, block_size
        self.known: set[Key] = set()

    @staticmethod
    def hash_of(key: Key) -> int:
        """The block hash of `key`. A key (content id, end) names the whole prompt up to
        `end` (kvviz.alloc.prefix), so hashing the key is hashing the chain: no parent walk,
        no memory of past keys."""
        return block_hash(None, key)

    def update(self, keys: dict[Key, Key | None], ts: float | None = None) -> int:
        """Publish what changed since the last call (`keys`: cached key -> its parent key);
        returns the number of events sent."""
        gone, new = self.known - keys.keys(), keys.keys() - self.known
        fmt, bs = self.pub.fmt, self.block_size
        events = []
        if gone:
            events.append(removed([self.hash_of(k) for k in sorted(gone)], fmt))
        for k in sorted(new, key=lambda k: (k[1], k[0])):  # parents (shorter) first
            p = keys[k]
            events.append(stored([self.hash_of(k)], None if p is None else self.hash_of(p),
                                 synthetic_tokens(k, bs), bs, fmt))
        self.known = set(keys)
        if events:
            self.pub.publish(events, ts)
        return len(events)

    def cached_hashes(self) -> set[int]:
        return {self.hash_of(k) for k in self.known}


def attach(collector, endpoint: str, replay: str | None = None, fmt: str = "vllm"
           ) -> list[LanePublisher]:
    """Publish the collector's paged prefix-caching lanes (lane k on port + k); raises
    ValueError when there is none or an address cannot be bound."""
    lanes = [ln for ln in collector.sim.lanes if cached_prefix_keys_supported(ln.alloc)]
    if not lanes:
        raise ValueError("--kv-events: no lane caches prefixes; add one such as "
                         "--lane paged:16:prefix")
    pubs: list[LanePublisher] = []
    try:
        for k, ln in enumerate(lanes):
            pub = Publisher(endpoint_for_rank(endpoint, k),
                            None if replay is None else endpoint_for_rank(replay, k), fmt,
                            dp_rank=k)
            pubs.append(LanePublisher(pub, ln.alloc.block_size))
    except BaseException:
        for p in pubs:
            p.pub.close()
        raise
    names = [ln.name for ln in lanes]
    collector.sim_hooks.append(_hook(pubs, names))
    return pubs


def cached_prefix_keys_supported(alloc) -> bool:
    return bool(getattr(alloc, "prefix_caching", False)) and hasattr(alloc, "_pool")


def _hook(pubs: list[LanePublisher], names: list[str]) -> Callable:
    def on_sample(sim, t: float) -> None:
        by_name = {ln.name: ln for ln in sim.lanes}
        for lp, name in zip(pubs, names):
            ln = by_name.get(name)
            if ln is not None:
                lp.update(cached_prefix_keys(ln.alloc))
    return on_sample
