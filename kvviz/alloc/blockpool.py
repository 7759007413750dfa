"""Free blocks of a paged allocator and its prefix cache.

vLLM's free-block queue (vllm/v1/core/kv_cache_utils.py, FreeKVCacheBlockQueue), in two parts
that keep its order exactly: blocks are taken from the front; a freed block without content to
reuse goes to the front (`put` gets a request's blocks in eviction order: its last block first)
and a freed cached block to the tail. So the queue is always

    front | plain freed blocks (last freed first) | never used, ascending | cached, LRU | tail

kept as a stack (plain and never-used blocks: a fresh pool hands out low ids first) and an
ordered dict (cached blocks, least recently freed first, evicted only when no plain block is
left). A prefix block is known by its key (kvviz/engine/tokens.py); several blocks may hold the
same key (vLLM keeps duplicates): a lookup returns the first one cached.

The event log (off unless `start_log()` was called): every block that becomes cached is appended
as ("stored", key, parent key) and every evicted block as ("removed", key, None), in the order
they happen (as vLLM emits BlockStored / BlockRemoved), until `drain_log()` takes them. A
KV-event publisher drains it once per sample, so blocks stored and evicted between two samples
are published too. Off, it costs one test of `self.log` per register and per evicted block.
"""
from __future__ import annotations

from collections import OrderedDict

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
        self._lru: OrderedDict[int, None] = OrderedDict()  # cached blocks, oldest first
        self._key_of: dict[int, Key] = {}
        self.has_key = np.zeros(num_blocks, np.bool_)  # per block: in _key_of
        self._block_of: dict[Key, int] = {}
        self.parent_of: dict[Key, Key | None] = {}  # cached key -> the key before it
        self.log: list[LogEntry] | None = None  # None: nobody drains it, nothing is logged

    def start_log(self) -> dict[Key, Key | None]:
        """Log from now on; returns the keys cached now (key -> parent key), the state the
        log's entries apply to."""
        self.log = []
        return self.cached_keys()

    def cached_keys(self) -> dict[Key, Key | None]:
        """The keys cached now (live or free), each with its parent key. O(cached blocks)."""
        return {k: self.parent_of.get(k) for k in self._block_of}

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
        out = self._stack[self._nfree - k : self._nfree][::-1].copy()
        self._nfree -= k
        if k < n:
            evicted = [self._lru.popitem(last=False)[0] for _ in range(n - k)]
            for b in evicted:
                self._forget(b)
            ev = np.asarray(evicted, np.int32)
            self.cached[ev] = False
            self.content[ev] = 0
            self.evictions += len(evicted)
            out = np.concatenate([out, ev])
        return out

    def _forget(self, b: int) -> None:
        """Block b no longer holds its key's content (evicted)."""
        gone = self._key_of.pop(b)
        self.has_key[b] = False
        copies = self._block_of[gone]
        del copies[b]
        if not copies:
            del self._block_of[gone]
            self.parent_of.pop(gone, None)
        if self.log is not None:
            self.log.append((REMOVED, gone, None))

    def put(self, blocks: np.ndarray, fills: np.ndarray) -> None:
        """Blocks nobody references any more, in eviction order (the first is evicted
        first): cached ones (with a key) join the tail in that order, the rest the front."""
        plain = blocks
        if self._key_of:
            keep = np.fromiter((int(b) in self._key_of for b in blocks), bool, blocks.size)
            for b, f in zip(blocks[keep].tolist(), fills[keep].tolist()):
                self._lru[b] = None
                self.cached[b] = True
                self.content[b] = f
            plain = blocks[~keep]
        self._push(plain)

    def _push(self, blocks: np.ndarray) -> None:
        self._stack[self._nfree : self._nfree + blocks.size] = blocks[::-1]
        self._nfree += int(blocks.size)

    def plain_list(self) -> list[int]:
        """The plain free blocks (never cached), the next taken last."""
        return self._stack[:self._nfree].tolist()

    def replay_start(self) -> tuple[np.ndarray, np.ndarray]:
        """For a window's replay (kvviz/alloc/freequeue.py): the plain free blocks (the next
        taken last) and the cached free blocks, least recently freed first."""
        return (self._stack[:self._nfree].astype(np.int64),
                np.fromiter(self._lru, np.int64, len(self._lru)))

    def replay_end(self, stack: np.ndarray, evicted: np.ndarray, cached: np.ndarray,
                   fills: np.ndarray) -> None:
        """After a replay: the plain free blocks are `stack`; the FIFO's first
        evicted.size blocks were evicted (block ids in order; their keys the caller's, see
        `forget_many`/`store_many`), and `cached` (with their fill levels) joined its tail."""
        self._stack[:stack.size] = stack
        self._nfree = int(stack.size)
        lru = self._lru
        for _ in range(min(evicted.size, len(lru))):
            lru.popitem(last=False)
        self.cached[evicted] = False
        self.content[evicted] = 0
        self.evictions += int(evicted.size)
        lru.update(dict.fromkeys(cached.tolist()))
        self.cached[cached] = True
        self.content[cached] = fills

    def forget_many(self, blocks: list[int]) -> None:
        """Evicted blocks lose their keys, in order (as `take` would forget them)."""
        for b in blocks:
            self._forget(b)

    def all_new(self, keys: list[Key]) -> bool:
        """Whether no block holds any of `keys` and none repeats."""
        return len(set(keys)) == len(keys) and not any(map(self._block_of.__contains__, keys))

    def store_new(self, keys: list[Key], blocks: np.ndarray, parents: list) -> None:
        """Blocks (without a key) now hold keys `all_new` said are new: what `register`
        for each, in order, leaves, at dict speed."""
        self._key_of.update(zip(blocks.tolist(), keys))
        self.has_key[blocks] = True
        self._block_of.update(zip(keys, ({b: None} for b in blocks.tolist())))
        self.parent_of.update(zip(keys, parents))

    def lookup(self, key: Key) -> int | None:
        """The first block cached under `key` (None: a miss)."""
        copies = self._block_of.get(key)
        return None if copies is None else next(iter(copies))

    def key_of(self, b: int) -> Key | None:
        return self._key_of.get(b)

    def is_cached(self, b: int) -> bool:
        return b in self._lru

    def reuse(self, b: int) -> int:
        """Take cached block b back into use (a prefix hit); returns its content in slots."""
        del self._lru[b]
        self.cached[b] = False
        fill = int(self.content[b])
        self.content[b] = 0
        return fill

    def register(self, key: Key, b: int, parent: Key | None = None) -> None:
        """Block b (held) now holds the content of `key`; `parent` is the key of the block
        before it (None for a request's first block). Another block may hold the same key:
        both stay cached (vLLM's duplicates)."""
        if self._key_of.get(b) == key:
            return
        if b in self._key_of:
            self._forget(b)
        self.parent_of.setdefault(key, parent)
        if self.log is not None:
            self.log.append((STORED, key, parent))
        self._key_of[b] = key
        self.has_key[b] = True
        self._block_of.setdefault(key, {})[b] = None
