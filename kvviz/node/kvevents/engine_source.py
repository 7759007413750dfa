"""kvviz's engine as a KV-event source: its paged lanes' prefix caches -> BlockStored /
BlockRemoved, published like a vLLM node (lane k of the paged prefix lanes = DP rank k,
port + k).

Events come from the block pool's event log (kvviz/engine/rule/view.py, PoolLog): every key
that became cached and every eviction, in the order they happened, drained once per sample.
So a block stored and evicted between two samples is published as BlockStored then
BlockRemoved. A lane whose pool is replaced (a --loop restart) publishes AllBlocksCleared,
then the new pool's cache. Each published batch can also be kept as a kv_batches row
(`rows`), so the collector records its own stream into its run (docs/FORMAT.md, "KV-event
streams").
"""
from __future__ import annotations

import hashlib
from collections.abc import Callable

from kvviz.engine.rule.view import REMOVED, Key, LogEntry
from kvviz.node.kvevents.endpoints import endpoint_for_rank
from kvviz.node.kvevents.publisher import Publisher, Unpublished, cleared, removed, stored

VOCAB = 32_000
ENCODING = {"vllm": "map", "sglang": "array"}  # how kvviz.node.kvevents.decode names them


def cached_prefix_keys(alloc) -> dict[Key, Key | None]:
    """The prefix blocks a paged allocator holds as cached content (live or free), each with
    the key of the block before it in its prompt (None for a prompt's first block)."""
    pool = getattr(alloc, "block_pool", None)
    return {} if pool is None else pool.cached_keys()


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
    """Publishes one lane's prefix-cache log. `rows` (None: not kept) collects a
    (lane, endpoint, dp_rank, encoding, seq, ts, n_events, n_stored, n_removed, n_cleared,
    payload) tuple per published batch until the owner takes them."""

    def __init__(self, pub: Publisher | Unpublished, block_size: int, lane: str = "",
                 endpoint: str = "") -> None:
        self.pub, self.block_size, self.lane, self.endpoint = pub, block_size, lane, endpoint
        self.known: set[Key] = set()
        self.pool = None
        self.rows: list[tuple] | None = None

    @staticmethod
    def hash_of(key: Key) -> int:
        """The block hash of `key`. A key (content id, end) names the whole prompt up to
        `end` (the rule's chained hash, kvviz/engine/rule/keys.py), so hashing the key is
        hashing the chain: no parent walk, no memory of past keys."""
        return block_hash(None, key)

    def follow(self, alloc, ts: float | None = None) -> int:
        """Publish what `alloc`'s prefix cache did since the last call (its whole cache on the
        first call, or when the lane's pool was replaced); returns the events sent."""
        pool = alloc.block_pool
        if pool is self.pool:
            return self._publish(self._events(pool.drain_log()), ts)
        head = [cleared(self.pub.fmt)] if self.known else []
        self.known.clear()
        self.pool = pool
        now = pool.start_log()  # the cache as it is: stored, parents (shorter keys) first
        entries = [("stored", k, now[k]) for k in sorted(now, key=lambda k: (k[1], k[0]))]
        return self._publish(head + self._events(entries), ts)

    def _events(self, entries: list[LogEntry]) -> list:
        """Log entries -> events in the same order: consecutive removals form one
        BlockRemoved; a store whose parent is the previous store's block extends it."""
        runs: list[list] = []  # [is_removal, hashes, parent hash, token ids]
        bs, known, h = self.block_size, self.known, self.hash_of
        for kind, key, parent in entries:
            last = runs[-1] if runs else None
            if kind == REMOVED:
                known.discard(key)
                if last is not None and last[0]:
                    last[1].append(h(key))
                else:
                    runs.append([True, [h(key)], None, None])
                continue
            known.add(key)
            ph = None if parent is None else h(parent)
            if last is not None and not last[0] and ph is not None and last[1][-1] == ph:
                last[1].append(h(key))
                last[3] += synthetic_tokens(key, bs)
            else:
                runs.append([False, [h(key)], ph, synthetic_tokens(key, bs)])
        fmt = self.pub.fmt
        return [removed(r[1], fmt) if r[0] else stored(r[1], r[2], r[3], bs, fmt) for r in runs]

    def _publish(self, events: list, ts: float | None) -> int:
        if not events:
            return 0
        seq = self.pub.publish(events, ts)
        if self.rows is not None:
            ns = nr = nc = 0
            for e in events:
                tag = e["type"] if isinstance(e, dict) else e[0]
                if tag == "BlockStored":
                    ns += len(e["block_hashes"] if isinstance(e, dict) else e[1])
                elif tag == "BlockRemoved":
                    nr += len(e["block_hashes"] if isinstance(e, dict) else e[1])
                else:
                    nc += 1
            self.rows.append((self.lane, self.endpoint, self.pub.dp_rank or 0,
                              ENCODING[self.pub.fmt], seq, self.pub.last_ts, len(events), ns,
                              nr, nc, self.pub.last_payload))
        return len(events)

    def cached_hashes(self) -> set[int]:
        return {self.hash_of(k) for k in self.known}


def attach(collector, endpoint: str | None, replay: str | None = None, fmt: str = "vllm",
           record: bool = True) -> list[LanePublisher]:
    """Publish the collector's paged prefix-caching lanes (lane k on port + k; no sockets
    when `endpoint` is None); raises ValueError when there is none or an address cannot be
    bound. With `record`, every batch also goes into the run's kv tables (the collector's
    `kv_rows`)."""
    lanes = [ln for ln in collector.sim.lanes if cached_prefix_keys_supported(ln.alloc)]
    if not lanes:
        flag = "--kv-events" if endpoint is not None else "--kv-events-record"
        raise ValueError(f"{flag}: no lane caches prefixes; add one such as "
                         "--lane paged:16:prefix")
    pubs: list[LanePublisher] = []
    try:
        for k, ln in enumerate(lanes):
            if endpoint is None:
                ep, pub = f"kvviz:{ln.name}", Unpublished(fmt, dp_rank=k)
            else:
                ep = endpoint_for_rank(endpoint, k)
                pub = Publisher(ep, None if replay is None else endpoint_for_rank(replay, k),
                                fmt, dp_rank=k)
            pubs.append(LanePublisher(pub, ln.alloc.block_size, ln.name, ep))
    except BaseException:
        for p in pubs:
            p.pub.close()
        raise
    if record:
        for lp in pubs:
            lp.rows = []
    collector.sim_hooks.append(_hook(pubs, collector if record else None))
    return pubs


def cached_prefix_keys_supported(alloc) -> bool:
    return bool(getattr(alloc, "prefix_caching", False)) and hasattr(alloc, "block_pool")


def _hook(pubs: list[LanePublisher], collector) -> Callable:
    def on_sample(sim, t: float) -> None:
        by_name = {ln.name: ln for ln in sim.lanes}
        for lp in pubs:
            ln = by_name.get(lp.lane)
            if ln is not None:
                lp.follow(ln.alloc)
            if collector is not None and lp.rows:
                collector.kv_rows.extend(lp.rows)
                lp.rows.clear()
    return on_sample
