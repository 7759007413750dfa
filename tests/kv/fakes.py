"""Tiny stand-in allocators with the two query methods RealKV uses (no admission logic)."""
from __future__ import annotations

import numpy as np

from kvviz.core.admission import Usage


class FakePaged:
    contiguous = False

    def __init__(self, num_blocks: int, block_size: int, seed: int = 0) -> None:
        self.block_size = block_size
        self.num_blocks = num_blocks
        self._free = list(np.random.default_rng(seed).permutation(num_blocks))
        self._tables: dict[int, list[int]] = {}
        self._lens: dict[int, int] = {}

    def usage(self) -> Usage:
        return Usage(self.num_blocks * self.block_size, 0, 0, 0, 0)

    def admit(self, seq_id: int, n: int) -> None:
        self._tables[seq_id], self._lens[seq_id] = [], 0
        self.append(seq_id, n)

    def append(self, seq_id: int, n: int = 1) -> None:
        self._lens[seq_id] += n
        while len(self._tables[seq_id]) * self.block_size < self._lens[seq_id]:
            self._tables[seq_id].append(int(self._free.pop()))

    def seq_allocated_tokens(self, seq_ids) -> np.ndarray:
        return np.asarray([len(self._tables[int(s)]) * self.block_size for s in seq_ids])

    def block_table(self, seq_id: int) -> np.ndarray:
        return np.asarray(self._tables[seq_id], np.int32)

    def block_tables(self, seq_ids) -> np.ndarray:
        width = max(len(self._tables[int(s)]) for s in seq_ids)
        out = np.zeros((len(seq_ids), width), np.int32)
        for i, s in enumerate(seq_ids):
            t = self._tables[int(s)]
            out[i, : len(t)] = t
        return out


class FakeContiguous:
    contiguous = True
    block_size = 1

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._ranges: dict[int, tuple[int, int]] = {}
        self._cursor = 3  # leave a hole at the start

    def usage(self) -> Usage:
        return Usage(self.capacity, 0, 0, 0, 0)

    def admit(self, seq_id: int, n: int, reserve: int) -> None:
        self._ranges[seq_id] = (self._cursor, reserve)
        self._cursor += reserve + 2
        assert self._cursor <= self.capacity

    def ranges(self, seq_ids) -> np.ndarray:
        return np.asarray([self._ranges[int(s)] for s in seq_ids], np.int64).reshape(-1, 2)
