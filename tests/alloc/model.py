"""vLLM's paged block pool as plainly as it can be written, the reference for the compiled
one (kvviz/engine/rule/pool.py): the free block queue is a Python list, front first; the
prefix cache a dict from a block's content to the blocks holding it, first cached first.

A block's content is a tuple chaining its parent's: the chain ids its tokens read inside the
prompt's chain, or the admission that wrote its own tokens, and where it ends. Taken from
the queue's front; freed blocks (a request's tail first) go to the front when they hold no
content, to the tail when they do; a cached block is evicted only when no plain one is left.
"""
from __future__ import annotations


class Model:
    def __init__(self, num_blocks: int, block_size: int, prefix_caching: bool,
                 chain_block: int) -> None:
        self.bs, self.cb, self.on = block_size, chain_block, prefix_caching
        self.queue = list(range(num_blocks))  # free blocks, the next taken first
        self.ref = [0] * num_blocks
        self.content: dict[int, tuple] = {}  # block -> the content it holds (cached)
        self.cached: dict[tuple, list[int]] = {}  # content -> blocks, first cached first
        self.tables: dict[int, list[int]] = {}
        self.lens: dict[int, int] = {}
        self.whose: dict[int, tuple[int, tuple, int]] = {}  # seq -> (admission, chain, cover)
        self.admissions = 0
        self.evictions = 0

    def key(self, seq: int, k: int) -> tuple:
        """The content of block k of `seq`."""
        r, ids, cover = self.whose[seq]
        parent = self.key(seq, k - 1) if k else ()
        s, e = k * self.bs, (k + 1) * self.bs
        read = tuple(ids[i] for i in range(s // self.cb, (min(e, cover) - 1) // self.cb + 1)
                     ) if s < cover else ()
        return (parent, read, 0 if e <= cover else r + 1, e)

    def _take(self, seq: int) -> int:
        b = self.queue.pop(0)
        if b in self.content:  # evicted
            self.cached[self.content[b]].remove(b)
            del self.content[b]
            self.evictions += 1
        self.ref[b] = 1
        self.tables[seq].append(b)
        return b

    def _cache_full(self, seq: int, first: int) -> None:
        for k in range(first, self.lens[seq] // self.bs if self.on else 0):
            b, c = self.tables[seq][k], self.key(seq, k)
            if self.content.get(b) != c:
                if b in self.content:
                    self.cached[self.content[b]].remove(b)
                self.content[b] = c
                self.cached.setdefault(c, []).append(b)

    def admit(self, seq: int, tokens: int, ids: tuple, cover: int) -> bool:
        self.whose[seq] = (self.admissions, ids, min(cover, tokens))
        hits: list[int] = []
        for k in range((tokens - 1) // self.bs if self.on else 0):
            found = self.cached.get(self.key(seq, k))
            if not found:
                break
            hits.append(found[0])
        need = -(-tokens // self.bs) - len(hits) + sum(self.ref[b] == 0 for b in hits)
        if need > len(self.queue):
            del self.whose[seq]
            return False
        self.admissions += 1
        for b in hits:
            if self.ref[b] == 0:
                self.queue.remove(b)
            self.ref[b] += 1
        self.tables[seq], self.lens[seq] = list(hits), tokens
        while len(self.tables[seq]) < -(-tokens // self.bs):
            self._take(seq)
        self._cache_full(seq, len(hits))
        return True

    def append(self, seq: int, tokens: int) -> bool:
        end = self.lens[seq] + tokens
        if -(-end // self.bs) - len(self.tables[seq]) > len(self.queue):
            return False
        while len(self.tables[seq]) < -(-end // self.bs):
            self._take(seq)
        first = self.lens[seq] // self.bs
        self.lens[seq] = end
        self._cache_full(seq, first)
        return True

    def release(self, seq: int) -> None:
        plain = []
        for b in reversed(self.tables.pop(seq)):
            self.ref[b] -= 1
            if self.ref[b] == 0:
                (self.queue.append if b in self.content else plain.append)(b)
        self.queue[:0] = plain
        del self.lens[seq], self.whose[seq]
