"""Keys a window stored without computing them: (request, block index) per block, until read.

A window's replay (kvviz/alloc/paged_window.py) fills thousands of blocks whose keys name
their request's own tokens (kvviz/engine/tokens.py: past the prompt's shared chain, a key
hashes the request id in). Such a key can equal no other request's key, and none of its own
request's other keys (each names a different end token), so while the request lives its
first life nothing can hit it but that request resuming: the pool keeps the block's
(request, block index) and a stamp of when it was stored, and computes the key only when
someone reads the dicts (`BlockPool.materialize`: a lookup, the key log, a resumed request's
hits). Evicting such a block forgets it without computing anything. Keys are 64-bit hashes:
as everywhere in kvviz's prefix cache, equal hashes stand for equal content.
"""
from __future__ import annotations

import numpy as np


class LazyKeys:
    def __init__(self, num_blocks: int) -> None:
        self.stamp = np.full(num_blocks, -1, np.int64)  # per block: when stored (-1: none)
        self.req = np.zeros(num_blocks, np.int64)
        self.index = np.zeros(num_blocks, np.int64)
        self.count = 0
        self.requests: set[int] = set()  # requests holding some now (a superset)
        self.ever: set[int] = set()  # requests that ever stored some (never cleared)
        self.source = None  # the BlockKeys that computes them (kvviz/engine/tokens.py)

    def store(self, blocks: np.ndarray, req: np.ndarray, index: np.ndarray,
              stamps: np.ndarray, source) -> None:
        if not blocks.size:
            return
        self.stamp[blocks] = stamps
        self.req[blocks] = req
        self.index[blocks] = index
        self.count += int(blocks.size)
        who = np.unique(req).tolist()
        self.requests.update(who)
        self.ever.update(who)
        self.source = source

    def drop(self, blocks: np.ndarray) -> None:
        """Evicted blocks (each holding a lazy key) forget it."""
        self.stamp[blocks] = -1
        self.count -= int(blocks.size)

    def drain(self) -> tuple[list[int], list, list, list[int]]:
        """Every lazy key, computed, in the order stored: (blocks, keys, parent keys,
        stamps); the store is empty afterwards."""
        b = np.flatnonzero(self.stamp >= 0)
        b = b[np.argsort(self.stamp[b], kind="stable")]
        req, idx = self.req[b], self.index[b]
        chains = {}
        for r in np.unique(req).tolist():
            chains[r] = self.source.chain(r, int(idx[req == r].max()) + 1)
        keys, parents = [], []
        for r, k in zip(req.tolist(), idx.tolist()):
            c = chains[r]
            keys.append(c[k])
            parents.append(c[k - 1] if k else None)
        stamps = self.stamp[b].tolist()
        self.stamp[b] = -1
        self.count = 0
        self.requests.clear()
        return b.tolist(), keys, parents, stamps
