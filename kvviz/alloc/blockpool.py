"""Free blocks of a Python paged allocator and its prefix cache (Learn's demos, real-mode unit
tests; the engine's own pool is compiled: kvviz/engine/rule/pool.py, the same order).

vLLM's free-block queue (vllm/v1/core/kv_cache_utils.py, FreeKVCacheBlockQueue), in two parts
that keep its order exactly: blocks are taken from the front; a freed block without content to
reuse goes to the front (`put` gets a request's blocks in eviction order: its last block first)
and a freed cached block to the tail. So the queue is always

    front | plain freed blocks (last freed first) | never used, ascending | cached, LRU | tail

A prefix block is known by its key; several blocks may hold the same key (vLLM keeps
duplicates): a lookup returns the first one cached.

The event log (off unless `start_log()` was called): every block that becomes cached is appended
as ("stored", key, parent key) and every evicted block as ("removed", key, None), in the order
they happen (as vLLM emits BlockStored / BlockRemoved), until `drain_log()` takes them.
"""
from __future__ import annotations

import numpy as np

Key = tuple[int, int]
STORED, REMOVED = "stored", "removed"
LogEntry = tuple[str, Key, "Key | None"]  # (STORED | REMOVED, key, parent key of a store)


class BlockPool:
    def __init__(self, num_blocks: int) -> None:
        self.cached = np.zeros(num_blocks, np.bool_)  # per block: free, holding content
        self.content = np.zeros(num_blocks, np.int32)  # slots of content in cached blocks
        self.evictions = 0
        self._stack = np.arange(num_blocks - 1, -1, -1, dtype=np.int32)  # [:nfree] are free
        self._nfree = num_blocks
        self._lru: dict[int, None] = {}  # cached free blocks, least recently freed first
        self._key_of: dict[int, Key] = {}  # block -> its key
        self._block_of: dict[Key, dict[int, None]] = {}  # key -> its blocks, first cached first
        self.parent_of: dict[Key, Key | None] = {}  # cached key -> the key before it
        self.log: list[LogEntry] | None = None  # None: nobody drains it, nothing is logged

    def is_cached(self, b: int) -> int:
        """1 if block b is a cached free block, else 0."""
        return int(b in self._lru)

    def start_log(self) -> dict[Key, Key | None]:
        """Log from now on; returns the keys cached now (key -> parent key)."""
        self.log = []
        return self.cached_keys()

    def cached_keys(self) -> dict[Key, Key | None]:
        """The keys cached now (live or free), each with its parent key."""
        return dict(self.parent_of)

    def drain_log(self) -> list[LogEntry]:
        """The entries since the last drain, oldest first (empty when not logging)."""
        out = self.log or []
        if self.log is not None:
            self.log = []
        return out

    @property
    def free_count(self) -> int:
        return self._nfree + len(self._lru)

    @property
    def keyed(self) -> bool:
        """Whether any block (held or free) holds a key."""
        return bool(self._key_of)

    @property
    def cached_count(self) -> int:
        return len(self._lru)

    def take(self, n: int) -> np.ndarray:
        """Pop n free blocks (the caller checked free_count), evicting cached ones last."""
        k = min(n, self._nfree)
        out = self._stack[self._nfree - k: self._nfree][::-1].copy()
        self._nfree -= k
        if k == n:
            return out
        lru = self._lru
        ev = [b for b, _ in zip(lru, range(n - k))]
        for b in ev:
            del lru[b]
            self._forget(b)
        ev_arr = np.asarray(ev, np.int32)
        self.cached[ev_arr] = False
        self.content[ev_arr] = 0
        self.evictions += len(ev)
        return np.concatenate([out, ev_arr])

    def _forget(self, b: int) -> None:
        """Block b no longer holds its key's content (evicted)."""
        key = self._key_of.pop(b)
        blocks = self._block_of[key]
        del blocks[b]
        if not blocks:
            del self._block_of[key]
            del self.parent_of[key]
        if self.log is not None:
            self.log.append((REMOVED, key, None))

    def put(self, blocks: np.ndarray, fills: np.ndarray | None) -> None:
        """Blocks nobody references any more, in eviction order (the first is evicted
        first): cached ones (with a key) join the tail in that order, the rest the front."""
        plain = blocks
        if self._key_of:
            keep = np.fromiter((b in self._key_of for b in blocks.tolist()), bool, blocks.size)
            kept = blocks[keep]
            self._lru.update(dict.fromkeys(kept.tolist()))
            self.cached[kept] = True
            self.content[kept] = fills[keep]
            plain = blocks[~keep]
        self._stack[self._nfree: self._nfree + plain.size] = plain[::-1]
        self._nfree += int(plain.size)

    def plain_list(self) -> list[int]:
        """The plain free blocks (never cached), the next taken last."""
        return self._stack[:self._nfree].tolist()

    def lookup(self, key: Key) -> int | None:
        """The first block cached under `key` (None: a miss)."""
        blocks = self._block_of.get(key)
        return next(iter(blocks)) if blocks else None

    def lookup_run(self, keys) -> list[int]:
        """`lookup` of keys in order, up to the first miss."""
        out = []
        for key in keys:
            b = self.lookup(key)
            if b is None:
                break
            out.append(b)
        return out

    cached_run = lookup_run

    def reuse_many(self, blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
        """Take the cached free ones of `blocks` (distinct prefix hits) back into use:
        returns those, the others (held), in order, and the content the first held."""
        free = np.fromiter((b in self._lru for b in blocks.tolist()), bool, blocks.size)
        mine = blocks[free]
        for b in mine.tolist():
            del self._lru[b]
        self.cached[mine] = False
        fill = int(self.content[mine].sum())
        self.content[mine] = 0
        return mine, blocks[~free], fill

    def register(self, key: Key, b: int, parent: Key | None = None) -> None:
        """Block b (held) now holds the content of `key`; `parent` is the key of the block
        before it (None for a request's first block). Another block may hold the same key:
        both stay cached (vLLM's duplicates)."""
        old = self._key_of.get(b)
        if old == key:
            return
        if old is not None:
            self._forget(b)
        if self.log is not None:
            self.log.append((STORED, key, parent))
        self._key_of[b] = key
        blocks = self._block_of.setdefault(key, {})
        if not blocks:
            self.parent_of[key] = parent
        blocks[b] = None

    def register_run(self, keys, blocks, parent: Key | None) -> None:
        """register(keys[i], blocks[i], keys[i - 1]) for each in order (parent: the key
        before keys[0])."""
        self.register_many(keys, blocks, [parent, *keys[:-1]])

    def register_many(self, keys, blocks, parents) -> None:
        """register(keys[i], blocks[i], parents[i]) for each in order."""
        for key, b, parent in zip(keys, blocks, parents):
            self.register(key, int(b), parent)
