"""Event ids 1, 2, 3, ... without gaps or repeats (docs/FORMAT.md), checked as they arrive in
any order with one bit per id: N ids are 1..N exactly when none repeats, none is below 1 and
the largest is N. The bits cover ids up to MAX_IDS (64 MiB of them); ids above it are counted
and their repeats not checked, which the report says."""
from __future__ import annotations

import numpy as np

MAX_IDS = 1 << 29


class Ids:
    def __init__(self) -> None:
        self.bits = bytearray(1 << 12)
        self.count = 0
        self.top = 0
        self.wrong = False  # a repeat, or an id below 1
        self.above = 0  # ids above MAX_IDS (not in the bits)

    def _room(self, i: int) -> None:
        if (i >> 3) >= len(self.bits):
            self.bits.extend(bytes(max(len(self.bits), (i >> 3) + 1 - len(self.bits))))

    def add(self, i: int) -> None:
        self.count += 1
        self.top = max(self.top, i)
        if i < 1:
            self.wrong = True
        elif i > MAX_IDS:
            self.above += 1
        else:
            i -= 1
            self._room(i)
            bit = 1 << (i & 7)
            self.wrong |= bool(self.bits[i >> 3] & bit)
            self.bits[i >> 3] |= bit

    def add_many(self, ids: np.ndarray) -> None:
        if not len(ids):
            return
        self.count += len(ids)
        self.top = max(self.top, int(ids.max()))
        self.wrong |= bool((ids < 1).any())
        inside = ids[(ids >= 1) & (ids <= MAX_IDS)] - 1
        self.above += int((ids > MAX_IDS).sum())
        if not len(inside):
            return
        self._room(int(inside.max()))
        bits = np.frombuffer(self.bits, np.uint8)
        byte, bit = inside >> 3, (1 << (inside & 7)).astype(np.uint8)
        self.wrong |= bool((bits[byte] & bit).any()) or len(np.unique(inside)) < len(inside)
        np.bitwise_or.at(bits, byte, bit)
        del bits  # the bytearray may grow again only without a view on it

    def ok(self) -> bool:
        """Whether the ids seen are 1..count (those above MAX_IDS not checked for repeats)."""
        return not self.wrong and self.top == self.count

    def unchecked(self) -> str:
        """What was not checked ("" when everything was)."""
        if not self.above:
            return ""
        return (f"{self.above} event ids above {MAX_IDS:,} were not checked for repeats (the "
                "verifier keeps one bit per id up to there)")
