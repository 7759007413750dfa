"""The cached free blocks in least-recently-freed order, as arrays (kvviz/alloc/blockpool.py).

A ring of block ids with tombstones: appending writes at the tail, a prefix hit taking a block
out of the middle only marks it (`pos[b] = -1`), and evicting pops valid entries from the head.
An entry i is valid iff pos[buf[i]] == i, so a block freed again later leaves its old entry
invalid. Appends and evictions of many blocks are one numpy operation each; the buffer is
compacted when its tail reaches the end.
"""
from __future__ import annotations

import numpy as np


class LruQueue:
    def __init__(self, num_blocks: int) -> None:
        self.buf = np.zeros(2 * num_blocks + 16, np.int64)
        self.pos = np.full(num_blocks, -1, np.int64)  # per block: its entry (-1: not queued)
        self.mark = bytearray(num_blocks)  # per block: queued (fast to read one by one)
        self._mark = np.frombuffer(self.mark, np.uint8)  # the same bytes, to write many
        self.head = self.tail = 0
        self.n = 0

    def __setstate__(self, state: dict) -> None:
        """A copy (copy.deepcopy, pickle) gets the bytes and their array view as two objects:
        make the view read the copy's own bytes again."""
        self.__dict__.update(state)
        self._mark = np.frombuffer(self.mark, np.uint8)

    def __len__(self) -> int:
        return self.n

    def __contains__(self, b: int) -> bool:
        return self.mark[b] == 1

    def items(self) -> np.ndarray:
        """The queued blocks, oldest first."""
        i = np.arange(self.head, self.tail)
        seg = self.buf[self.head:self.tail]
        return seg[self.pos[seg] == i]

    def append(self, blocks: np.ndarray) -> None:
        """Queue blocks (none queued now) at the tail, in order."""
        k = int(blocks.size)
        if self.tail + k > self.buf.size:
            self._compact(k)
        self.buf[self.tail:self.tail + k] = blocks
        self.pos[blocks] = np.arange(self.tail, self.tail + k)
        self._mark[blocks] = 1
        self.tail += k
        self.n += k

    def remove(self, b: int) -> None:
        self.pos[b] = -1
        self.mark[b] = 0
        self.n -= 1

    def remove_many(self, blocks: np.ndarray) -> None:
        """remove() for each of `blocks` (distinct, all queued)."""
        self.pos[blocks] = -1
        self._mark[blocks] = 0
        self.n -= int(blocks.size)

    def older(self, blocks) -> int:
        """How many queued blocks are evicted before any of `blocks` (all queued): the
        valid entries older than the oldest of them."""
        p = int(self.pos[blocks].min())
        seg = self.buf[self.head:p]
        return int(np.count_nonzero(self.pos[seg] == np.arange(self.head, p)))

    def pop(self, k: int) -> np.ndarray:
        """Take the k oldest."""
        if k > self.n:
            raise ValueError(f"LruQueue.pop: {k} asked, {self.n} queued")
        if k <= 4:  # a few: one by one beats a dozen numpy calls
            buf, pos, mark, got = self.buf, self.pos, self.mark, []
            i = self.head
            while len(got) < k:
                b = int(buf[i])
                if pos[b] == i:
                    got.append(b)
                    pos[b] = -1
                    mark[b] = 0
                i += 1
            self.head = i
            self.n -= k
            return np.asarray(got, np.int64)
        out = []
        while k > 0:
            m = min(self.tail - self.head, 2 * k + 64)
            seg = self.buf[self.head:self.head + m]
            ok = np.flatnonzero(self.pos[seg] == np.arange(self.head, self.head + m))
            got = ok[:k]
            out.append(seg[got])
            self.pos[seg[got]] = -1
            self._mark[seg[got]] = 0
            self.head += int(got[-1]) + 1 if got.size == k else m
            self.n -= int(got.size)
            k -= int(got.size)
        return np.concatenate(out) if out else np.zeros(0, np.int64)

    def _compact(self, extra: int) -> None:
        live = self.items()
        if live.size + extra > self.buf.size:
            self.buf = np.zeros(2 * (live.size + extra), np.int64)
        self.buf[:live.size] = live
        self.pos[live] = np.arange(live.size)
        self.head, self.tail = 0, int(live.size)
