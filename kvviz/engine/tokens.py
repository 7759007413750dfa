"""Synthetic token ids of a workload and the prefix-cache key of every full block.

A trace names prompt content only by hash chains (kvviz.core.workload.Workload.chains), never by
token ids, so kvviz makes the ids up, the same way everywhere:

  position p of request r, inside its prompt's chain   -> from (chain id of p's chain block, p)
  any other position (own prompt text, every output)   -> from (r, p)

Equal ids therefore mean equal content exactly where the trace says so, and a request's own
text and outputs are its alone. Prefix caching keys a block the way vLLM hashes it: block k's
key chains the key of block k-1 with what fills block k, so two blocks have equal keys iff
their requests have equal tokens from position 0 to the end of the block. Output blocks are
keyed too: a preempted request finds its own blocks again when it resumes.

A key is (content hash, end token): kvviz.node.kvevents publishes keys as block hashes.
"""
from __future__ import annotations

import numpy as np

from kvviz.core.workload import Workload

Key = tuple[int, int]
_MUL = np.uint64(0x9E3779B97F4A7C15)
_MIX = np.uint64(0xBF58476D1CE4E5B9)
_AHEAD = 8  # own keys computed past the block asked for: one call per 8 decode blocks


def token_ids(w: Workload, r: int, n: int) -> list[int]:
    """The first n token ids of request r (prompt, then outputs), each in [0, 2^31): ids
    inside the prompt's chain are even, the request's own are odd (never equal)."""
    ptr, ids, block = w.chains()
    chain = ids[ptr[r]:ptr[r + 1]]
    cover = min(int(chain.size) * block, int(w.prompt[r]))
    pos = np.arange(n, dtype=np.uint64)
    inside = pos < np.uint64(cover)
    src = np.where(inside, chain[np.minimum(pos // np.uint64(block), max(chain.size - 1, 0))]
                   .astype(np.uint64) if chain.size else np.uint64(0), np.uint64(r))
    with np.errstate(over="ignore"):
        x = (src * _MUL + pos) * _MIX
        x ^= x >> np.uint64(29)
        x *= _MUL
    out = ((x >> np.uint64(34)) & np.uint64((1 << 30) - 1)) * np.uint64(2)
    return (out + (~inside).astype(np.uint64)).astype(np.int64).tolist()


class BlockKeys:
    """Per request, the keys of its full blocks at one block size, computed on demand and
    kept while the request lives (`forget` drops them). Cost: one tuple hash per block (a
    request's own keys are computed a few blocks ahead of the one asked for)."""

    def __init__(self, w: Workload, block_size: int) -> None:
        self.bs = block_size
        self.prompt = w.prompt
        self.ptr, self.ids, self.block = w.chains()
        self._keys: dict[int, list[Key]] = {}
        self._start = self.ptr.tolist()  # per request: its chain's first id, and
        self._cover = np.minimum(np.diff(self.ptr) * self.block, w.prompt).tolist()  # reach
        self._reach = [-(-c // block_size) for c in self._cover]  # blocks the chain reaches

    def keys(self, r: int, nfull: int) -> KeyChain:
        """Keys of blocks 0..nfull-1 of request r, computed when first read."""
        return KeyChain(self, r, nfull)

    def upto(self, r: int, nfull: int) -> list[Key]:
        """Keys of blocks 0..nfull-1 of request r (the list may be longer; read [:nfull])."""
        have = self._keys.get(r)
        if have is None:
            have = self._keys[r] = []
        k = len(have)
        if k < nfull:
            if k and k >= self._reach[r]:  # past the shared chain: the request's own keys,
                self._own(have, r, nfull + _AHEAD)  # a few ahead (decode asks one a step)
            else:
                self._extend(have, r, nfull)
        return have

    def chain(self, r: int, nfull: int) -> list[Key]:
        """`upto` without keeping the keys (for a request that may have finished)."""
        have = self._keys.get(r)
        if have is not None and len(have) >= nfull:
            return have
        return self._extend(list(have or ()), r, nfull)

    def known(self, r: int) -> bool:
        """Whether r's keys were computed and kept (it was admitted before, or asked)."""
        return r in self._keys

    def own_from(self, r: np.ndarray) -> np.ndarray:
        """Per request, its first block whose key names its own tokens (the request id is
        hashed in: past its prompt's shared chain), so no other request's key equals it."""
        cover = np.minimum((self.ptr[r + 1] - self.ptr[r]) * self.block, self.prompt[r])
        return cover // self.bs

    def _extend(self, have: list[Key], r: int, nfull: int) -> list[Key]:
        bs, cb = self.bs, self.block
        a, cover = self._start[r], self._cover[r]
        prev = have[-1][0] if have else 0
        reach = -(-cover // bs)  # blocks the prompt's shared chain reaches
        first, last = len(have), min(nfull, reach)
        if first < last:
            lo = first * bs // cb  # the chain ids these blocks read, in one slice
            chain = self.ids[a + lo:a + (min(last * bs, cover) - 1) // cb + 1].tolist()
        if first < last and cb == bs:  # one chain id per block: block k reads chain[k - lo]
            for e, cid in zip(range(first * bs + bs, last * bs + 1, bs), chain):
                prev = hash((prev, (cid,), -1 if e <= cover else r, e))
                have.append((prev, e))
            first = last
        for k in range(first, last):
            s, e = k * bs, (k + 1) * bs
            ids = tuple(chain[s // cb - lo:(min(e, cover) - 1) // cb + 1 - lo])
            prev = hash((prev, ids, -1 if e <= cover else r, e))
            have.append((prev, e))
        if len(have) < reach:  # (nfull < reach: nothing more)
            return have
        return self._own(have, r, nfull)

    def _own(self, have: list[Key], r: int, nfull: int) -> list[Key]:
        """Extend `have` (reaching past r's shared chain, or empty with none) to nfull keys
        of the request's own tokens."""
        bs, prev = self.bs, have[-1][0] if have else 0
        for e in range(len(have) * bs + bs, nfull * bs + 1, bs):
            prev = hash((prev, (), r, e))
            have.append((prev, e))
        return have

    def forget(self, r: int) -> None:
        self._keys.pop(r, None)


class KeyChain:
    """Request r's keys for blocks 0..n-1 as a sequence: computed (and kept, `upto`) when
    first read, so a window that stores them lazily (kvviz/alloc/lazykeys.py) never does."""

    __slots__ = ("source", "r", "n")

    def __init__(self, source: BlockKeys, r: int, n: int) -> None:
        self.source, self.r, self.n = source, r, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):
        return self.source.upto(self.r, self.n)[:self.n][i] if isinstance(i, slice) else \
            self.source.upto(self.r, self.n)[i]
