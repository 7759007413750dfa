"""Free blocks of a paged allocator and its prefix cache.

vLLM's free-block queue (vllm/v1/core/kv_cache_utils.py, FreeKVCacheBlockQueue), in two parts
that keep its order exactly: blocks are taken from the front; a freed block without content to
reuse goes to the front (`put` gets a request's blocks in eviction order: its last block first)
and a freed cached block to the tail. So the queue is always

    front | plain freed blocks (last freed first) | never used, ascending | cached, LRU | tail

kept as a stack (plain and never-used blocks: a fresh pool hands out low ids first) and an
array ring (cached blocks, least recently freed first, evicted only when no plain block is
left; kvviz/alloc/lruqueue.py). The dicts below are read through properties that first compute
the keys a window stored lazily (kvviz/alloc/lazykeys.py). A prefix block is known by its key
(kvviz/engine/tokens.py); several blocks may hold the same key (vLLM keeps duplicates): a
lookup returns the first one cached. A key's first block is one dict entry (`_first`, in the
order the keys were stored); only a key held by several blocks has a list of them (`_more`).
A key's parent key and stamp are kept per block (`_pob`, `_bob`: lists, one entry per block,
copied to each duplicate), read only by the event log's readers and `materialize`'s order, so
storing a key is one dict entry and evicting it deletes one.

The event log (off unless `start_log()` was called): every block that becomes cached is appended
as ("stored", key, parent key) and every evicted block as ("removed", key, None), in the order
they happen (as vLLM emits BlockStored / BlockRemoved), until `drain_log()` takes them. A
KV-event publisher drains it once per sample, so blocks stored and evicted between two samples
are published too. Off, it costs one test of `self.log` per register and per evicted block.
"""
from __future__ import annotations

from collections import deque
from itertools import islice

import numpy as np

from kvviz.alloc.lazykeys import LazyKeys
from kvviz.alloc.lruqueue import LruQueue
from kvviz.alloc.poolreplay import PoolReplay

Key = tuple[int, int]
STORED, REMOVED = "stored", "removed"
LogEntry = tuple[str, Key, "Key | None"]  # (STORED | REMOVED, key, parent key of a store)


class BlockPool(PoolReplay):
    def __init__(self, num_blocks: int) -> None:
        self.cached = np.zeros(num_blocks, np.bool_)  # per block: free, holding content
        self.content = np.zeros(num_blocks, np.int32)  # slots of content in cached blocks
        self.evictions = 0
        self._stack = np.arange(num_blocks - 1, -1, -1, dtype=np.int32)  # [:nfree] are free
        self._nfree = num_blocks
        self.lru = LruQueue(num_blocks)  # cached blocks, oldest first (lruqueue.py)
        # is_cached(b): 1 if block b is a cached free block, else 0 (the LRU's mark byte)
        self.is_cached = self.lru.mark.__getitem__
        # per block (lists, read through properties): its key (None: none, or lazy), the
        # key's parent key and the stamp of the key's entry in _first (stale once forgotten)
        self._kob: list[Key | None] = [None] * num_blocks
        self._pob: list[Key | None] = [None] * num_blocks
        self._bob: list[int] = [0] * num_blocks
        self._first: dict[Key, int] = {}  # key -> its first block cached, keys by stamp
        self._more: dict[Key, list[int]] = {}  # a key several blocks hold -> them, in order
        self._clock = 0  # stamps: one per key stored, in order
        # changes whenever a cached key's first block changes or goes (storing keys adds
        # keys only: a lookup's leading run stays, unless its first miss came)
        self.version = 0
        self._has = bytearray(num_blocks)  # per block: holds a key (read one by one)
        self.has_key = np.frombuffer(self._has, np.bool_)  # the same bytes, as an array
        self.lazy = LazyKeys(num_blocks)  # keys stored by (request, block) (lazykeys.py)
        self.log: list[LogEntry] | None = None  # None: nobody drains it, nothing is logged

    def __setstate__(self, state: dict) -> None:
        """A copy (copy.deepcopy, pickle) gets `_has` and `has_key` as two objects, and
        `is_cached` may read the old queue's marks: bind them to the copy's own bytes."""
        self.__dict__.update(state)
        self.has_key = np.frombuffer(self._has, np.bool_)
        self.is_cached = self.lru.mark.__getitem__

    @property
    def _lru(self) -> dict[int, None]:
        """The cached free blocks, oldest first (a copy, for tests and readers)."""
        return dict.fromkeys(self.lru.items().tolist())

    @property
    def _key_of(self) -> dict[int, Key]:
        """block -> its key, for every block holding one (a copy, for tests)."""
        self.materialize()
        return {b: k for b, k in enumerate(self._kob) if k is not None}

    @property
    def _block_of(self) -> dict[Key, dict[int, None]]:
        """key -> its blocks, first cached first, keys in stamp order (a copy, for tests)."""
        self.materialize()
        more = self._more
        return {k: dict.fromkeys(more[k] if k in more else (b,))
                for k, b in self._first.items()}

    @property
    def parent_of(self) -> dict[Key, Key | None]:
        """cached key -> the key before it (a copy)."""
        self.materialize()
        pob = self._pob
        return {k: pob[b] for k, b in self._first.items()}

    def materialize(self) -> None:
        """Compute the lazy keys and enter them in the dicts where storing them one by one
        would have: each key's entry in stamp order."""
        if not self.lazy.count:
            return
        blocks, keys, parents, stamps = self.lazy.drain()
        self.version += 1
        kob, pob, bob, first, more = self._kob, self._pob, self._bob, self._first, self._more
        for b, k, p, t in zip(blocks, keys, parents, stamps):
            kob[b] = k
            was = first.setdefault(k, b)
            if was != b:
                pob[b], bob[b] = pob[was], bob[was]
                more.setdefault(k, [was]).append(b)
            else:
                pob[b], bob[b] = p, t
        self._first = dict(sorted(first.items(), key=lambda kv: bob[kv[1]]))

    def stamps(self, n: int) -> int:
        """Reserve n stamps (for keys stored in that order); returns the first."""
        self._clock += n
        return self._clock - n

    def start_log(self) -> dict[Key, Key | None]:
        """Log from now on; returns the keys cached now (key -> parent key), the state the
        log's entries apply to."""
        self.materialize()
        self.log = []
        return self.cached_keys()

    def cached_keys(self) -> dict[Key, Key | None]:
        """The keys cached now (live or free), each with its parent key. O(cached blocks)."""
        return self.parent_of

    def drain_log(self) -> list[LogEntry]:
        """The entries since the last drain, oldest first (empty when not logging)."""
        out = self.log or []
        if self.log is not None:
            self.log = []
        return out

    @property
    def free_count(self) -> int:
        return self._nfree + self.lru.n

    @property
    def keyed(self) -> bool:
        """Whether any block (held or free) holds a key: a key in _first or a lazy one (O(1);
        a scan of `_has` would cost a release O(blocks))."""
        return bool(self._first) or self.lazy.count > 0

    @property
    def cached_count(self) -> int:
        return self.lru.n

    def take(self, n: int) -> np.ndarray:
        """Pop n free blocks (the caller checked free_count), evicting cached ones last."""
        k = min(n, self._nfree)
        out = self._stack[self._nfree - k : self._nfree][::-1].copy()
        self._nfree -= k
        if k < n:
            ev = self.lru.pop(n - k)
            self._forget_all(ev.tolist())
            self.cached[ev] = False
            self.content[ev] = 0
            self.evictions += int(ev.size)
            out = np.concatenate([out, ev.astype(np.int32)])
        return out

    def _forget(self, b: int) -> None:
        """Block b no longer holds its key's content (evicted)."""
        self._forget_all((b,))

    def _forget_all(self, blocks) -> None:
        """_forget for each of `blocks` (ints), in order."""
        has, kob, first, more, log = self._has, self._kob, self._first, self._more, self.log
        self.version += 1
        gone = list(map(kob.__getitem__, blocks))
        if not more and log is None and None not in gone:  # each its key's only block
            for b in blocks:
                kob[b] = None
                has[b] = 0
            deque(map(first.__delitem__, gone), 0)
            return
        lazy = []
        for b in blocks:
            has[b] = 0
            gone = kob[b]
            if gone is None:  # a lazy key: nothing else holds it
                lazy.append(b)
                continue
            kob[b] = None
            copies = more.get(gone) if more else None
            if copies is None:
                del first[gone]
            else:
                copies.remove(b)
                first[gone] = copies[0]
                if len(copies) == 1:
                    del more[gone]
            if log is not None:
                log.append((REMOVED, gone, None))
        if lazy:
            self.lazy.drop(np.asarray(lazy))

    def put(self, blocks: np.ndarray, fills: np.ndarray) -> None:
        """Blocks nobody references any more, in eviction order (the first is evicted
        first): cached ones (with a key) join the tail in that order, the rest the front."""
        plain = blocks
        if self.keyed:
            keep = self.has_key[blocks]
            kept = blocks[keep]
            self.lru.append(kept)
            self.cached[kept] = True
            self.content[kept] = fills[keep]
            plain = blocks[~keep]
        self._push(plain)

    def _push(self, blocks: np.ndarray) -> None:
        self._stack[self._nfree : self._nfree + blocks.size] = blocks[::-1]
        self._nfree += int(blocks.size)

    def plain_list(self) -> list[int]:
        """The plain free blocks (never cached), the next taken last."""
        return self._stack[:self._nfree].tolist()

    def cached_run(self, keys) -> list[int]:
        """Blocks of the longest leading run of `keys` cached now (the first block cached
        under each), without computing lazy keys: the caller materialized its request's.
        Looked up 16 at a time, so the keys past the first miss are mostly not."""
        get, it, got = self._first.get, iter(keys), []
        while True:
            part = list(map(get, islice(it, 16)))
            if None in part:
                del part[part.index(None):]
                got += part
                return got
            got += part
            if len(part) < 16:
                return got

    def holds(self, key: Key) -> bool:
        """Whether some block is cached under `key` (lazy keys aside)."""
        return key in self._first

    def lookup(self, key: Key) -> int | None:
        """The first block cached under `key` (None: a miss)."""
        self.materialize()
        return self._first.get(key)

    def lookup_run(self, keys: list[Key]) -> list[int]:
        """`lookup` of keys in order, up to the first miss."""
        self.materialize()
        return self.cached_run(keys)

    def reuse_many(self, blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
        """Take the cached free ones of `blocks` (distinct prefix hits) back into use:
        returns those, the others (held), in order, and the content the first held, in
        slots."""
        free = self.lru._mark[blocks].astype(np.bool_)
        mine = blocks[free]
        self.lru.remove_many(mine)
        self.cached[mine] = False
        fill = int(self.content[mine].sum())
        self.content[mine] = 0
        return mine, blocks[~free], fill

    def register(self, key: Key, b: int, parent: Key | None = None) -> None:
        """Block b (held) now holds the content of `key`; `parent` is the key of the block
        before it (None for a request's first block). Another block may hold the same key:
        both stay cached (vLLM's duplicates)."""
        self.register_run((key,), (b,), parent)

    def register_run(self, keys, blocks, parent: Key | None) -> None:
        """register(keys[i], blocks[i], keys[i - 1]) for each in order (parent: the key
        before keys[0])."""
        self.register_many(keys, blocks, [parent, *keys[:-1]])

    def register_many(self, keys, blocks, parents) -> None:
        """register(keys[i], blocks[i], parents[i]) for each in order, in one pass."""
        kob, pob, bob, first, more, has, log = (self._kob, self._pob, self._bob, self._first,
                                                self._more, self._has, self.log)
        lazy, clock = self.lazy, self._clock
        for key, b, parent in zip(keys, blocks, parents):
            old = kob[b]
            if old is None and lazy.count and lazy.stamp[b] >= 0:
                self.materialize()  # b holds a lazy key: compute them
                old, first = kob[b], self._first
            if old is not None:
                if old == key:
                    continue
                self._forget(b)
            if log is not None:
                log.append((STORED, key, parent))
            kob[b] = key
            has[b] = 1
            was = first.setdefault(key, b)
            if was == b:
                pob[b] = parent
                bob[b] = clock
                clock += 1
            else:
                pob[b], bob[b] = pob[was], bob[was]
                more.setdefault(key, [was]).append(b)
        self._clock = clock
