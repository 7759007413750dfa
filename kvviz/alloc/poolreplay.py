"""BlockPool's verbs for a window's replay (kvviz/alloc/paged_window.py, freequeue.py).

The replay works out a window's takes and releases in closed form, then hands the pool its
end state: the plain free blocks, the cached blocks evicted and those that joined the LRU
(`replay_end`), and the keys stored and forgotten (`forget_many`, `all_new`, `store_new`),
as `take`, `put` and `register` one by one would have left them. A mixin over BlockPool's
state (kvviz/alloc/blockpool.py), apart only to keep each file one concern.
"""
from __future__ import annotations

import numpy as np

Key = tuple[int, int]


class PoolReplay:
    def replay_start(self) -> tuple[np.ndarray, np.ndarray]:
        """For a window's replay (kvviz/alloc/freequeue.py): the plain free blocks (the next
        taken last) and the cached free blocks, least recently freed first."""
        return self._stack[:self._nfree].astype(np.int64), self.lru.items()

    def replay_end(self, stack: np.ndarray, evicted: np.ndarray, cached: np.ndarray,
                   fills: np.ndarray, kept: int = 0) -> None:
        """After a replay: the plain free blocks are the first `kept` of those at the start
        (the replay never reached them), then `stack`; the FIFO's first evicted.size blocks
        were evicted (block ids in order; their keys the caller's, see
        `forget_many`/`store_many`), and `cached` (with their fill levels) joined its tail."""
        self._stack[kept:kept + stack.size] = stack
        self._nfree = kept + int(stack.size)
        self.lru.pop(min(int(evicted.size), self.lru.n))
        self.cached[evicted] = False
        self.content[evicted] = 0
        self.evictions += int(evicted.size)
        self.lru.append(cached)
        self.cached[cached] = True
        self.content[cached] = fills

    def forget_many(self, blocks: np.ndarray) -> None:
        """Evicted blocks lose their keys, in order (as `take` would forget them)."""
        if not blocks.size:
            return
        lazy = self.lazy.stamp[blocks] >= 0 if self.lazy.count else np.zeros(blocks.size, bool)
        if lazy.any():
            self.lazy.drop(blocks[lazy])
            self.has_key[blocks[lazy]] = False
        for b in blocks[~lazy].tolist():
            self._forget(b)

    def all_new(self, keys: list[Key]) -> bool:
        """Whether no block holds any of `keys` (lazy keys aside: see lazykeys.py) and none
        repeats."""
        return len(set(keys)) == len(keys) and not any(map(self._first.__contains__, keys))

    def store_new(self, keys: list[Key], blocks: np.ndarray, parents: list,
                  stamps: list[int]) -> None:
        """Blocks (without a key) now hold keys `all_new` said are new: what `register`
        for each, in order, leaves, at dict speed."""
        kob, pob, bob, ids = self._kob, self._pob, self._bob, blocks.tolist()
        for b, k, p, t in zip(ids, keys, parents, stamps):
            kob[b], pob[b], bob[b] = k, p, t
        self.has_key[blocks] = True
        self._first.update(zip(keys, ids))
