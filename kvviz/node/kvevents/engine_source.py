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
from collections.abc import Callable, Iterable

from kvviz.node.kvevents.endpoints import endpoint_for_rank
from kvviz.node.kvevents.publisher import Publisher, removed, stored

Key = tuple[int, int]  # (prefix group, block index in the prompt)
VOCAB = 32_000


def cached_prefix_keys(alloc) -> set[Key]:
    """The prefix blocks a paged allocator holds as cached content (live or free)."""
    pool = getattr(alloc, "_pool", None)
    return set(getattr(pool, "_block_of", ()))


def block_hash(parent: int | None, key: Key) -> int:
    """A 64-bit hash chaining the parent's (like the engines': parent hash + block content)."""
    h = hashlib.blake2b(digest_size=8)
    h.update((parent or 0).to_bytes(8, "big"))
    h.update(key[0].to_bytes(8, "big", signed=True) + key[1].to_bytes(8, "big"))
    return int.from_bytes(h.digest(), "big")


def synthetic_tokens(key: Key, block_size: int) -> list[int]:
    """Token ids for block `key`: the same for every request of the group (loads have none)."""
    base = key[0] * 7919 + key[1] * block_size
    return [(base + j) % VOCAB for j in range(block_size)]


def _runs(keys: Iterable[Key]) -> list[list[Key]]:
    """Sorted keys cut into chains: same group, consecutive block indices."""
    out: list[list[Key]] = []
    for k in sorted(keys):
        if out and out[-1][-1][0] == k[0] and out[-1][-1][1] + 1 == k[1]:
            out[-1].append(k)
        else:
            out.append([k])
    return out


class LanePublisher:
    """Diffs one lane's cached prefix blocks against the previous look and publishes."""

    def __init__(self, pub: Publisher, block_size: int) -> None:
        self.pub, self.block_size = pub, block_size
        self.known: set[Key] = set()
        self._hash: dict[Key, int] = {}

    def hash_of(self, key: Key) -> int:
        h = self._hash.get(key)
        if h is None:
            parent = self.hash_of((key[0], key[1] - 1)) if key[1] > 0 else None
            h = self._hash[key] = block_hash(parent, key)
        return h

    def update(self, keys: set[Key], ts: float | None = None) -> int:
        """Publish what changed since the last call; returns the number of events sent."""
        gone, new = self.known - keys, keys - self.known
        fmt, bs = self.pub.fmt, self.block_size
        events = []
        if gone:
            events.append(removed([self.hash_of(k) for k in sorted(gone)], fmt))
        for run in _runs(new):
            g, i0 = run[0]
            parent = self.hash_of((g, i0 - 1)) if i0 > 0 else None
            toks = [t for k in run for t in synthetic_tokens(k, bs)]
            events.append(stored([self.hash_of(k) for k in run], parent, toks, bs, fmt))
        self.known = keys
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
