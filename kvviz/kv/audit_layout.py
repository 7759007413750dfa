"""The structural half of the real-mode audit (kvviz/kv/audit.py): block tables and ranges
against the allocator's BlockMap, and the failure records. numpy only.

    tables  paged: each block's refcount equals the number of live tables holding it (so a
            block is in two tables only when shared), a free or cached block is in no table,
            an owned block is in its owner's table
    ranges  contiguous: ranges fit the map and hold their written slots, do not overlap,
            every cell of a range is owned by the range's sequence, no owned cell lies
            outside every range
"""
from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from kvviz.core.blockmap import FREE, BlockMap

MAX_REPORTED = 8  # failures described per lane and sample; all are counted


class AuditFailure(NamedTuple):
    seq_id: int  # the sequence concerned, -1 when none is (e.g. a block in no table)
    check: str  # content | tables | ranges | attention
    reason: str


class AuditResult(NamedTuple):
    checks: int
    failed: int
    failures: tuple[AuditFailure, ...]  # at most MAX_REPORTED

    @property
    def ok(self) -> bool:
        return self.failed == 0


class Found:
    """Failures of one audit: counted all, described up to MAX_REPORTED."""

    def __init__(self, id_offset: int = 0) -> None:
        self.id_offset = id_offset
        self.checks = 0
        self.failed = 0
        self.items: list[AuditFailure] = []

    def add(self, checks: int, bad: np.ndarray, describe: Callable[[int], AuditFailure]) -> None:
        """`bad`: indices of the failed checks among `checks`."""
        self.checks += int(checks)
        self.failed += int(bad.size)
        for i in bad[: max(0, MAX_REPORTED - len(self.items))].tolist():
            self.items.append(describe(int(i)))

    def sid(self, seq: int) -> int:
        """A sequence id as the recording shows it (run-wide; -1 stays -1)."""
        return seq + self.id_offset if seq >= 0 else seq

    def result(self) -> AuditResult:
        return AuditResult(self.checks, self.failed, tuple(self.items))


def check_tables(found: Found, ids, tables, nblocks, bm: BlockMap) -> None:
    n = int(bm.owner.size)
    used = np.arange(tables.shape[1])[None, :] < nblocks[:, None]
    entries = tables[used]
    holder = np.broadcast_to(ids[:, None], tables.shape)[used]
    outside = (entries < 0) | (entries >= n)
    if outside.any():
        i = np.flatnonzero(outside)
        found.add(entries.size, i, lambda k: AuditFailure(
            found.sid(int(holder[k])), "tables", f"sequence {found.sid(int(holder[k]))}: block "
            f"id {int(entries[k])} "
            f"is outside 0..{n - 1}"))
        entries, holder = entries[~outside], holder[~outside]
    count = np.bincount(entries, minlength=n)
    owner, ref = bm.owner, bm.refcount.astype(np.int64)
    owner_holds = np.zeros(n, bool)
    owner_holds[entries[owner[entries] == holder]] = True
    first = np.full(n, -1, np.int64)
    first[entries[::-1]] = holder[::-1]  # some sequence whose table holds the block
    wrong = (count != ref) | ((count > 0) & (owner == FREE)) | (
        (owner != FREE) & (count > 0) & ~owner_holds) | ((owner != FREE) & (count == 0))

    def describe(b: int) -> AuditFailure:
        c, r = int(count[b]), int(ref[b])
        o, s = found.sid(int(owner[b])), found.sid(int(first[b]))
        if c > 0 and o == FREE:
            state = "cached" if bm.cached[b] else "free"
            why = f"block {b} is {state} but in {c} block table(s) (sequence {s})"
        elif c > 1 and r < c:
            why = f"block {b} is in {c} block tables (sequence {s}, ...) but its refcount is {r}"
        elif c == 0:
            why = (f"block {b} has refcount {r} but is in no block table" if o == FREE
                   else f"block {b} is owned by sequence {o} but in no block table")
        elif not owner_holds[b]:
            why = f"block {b} is owned by sequence {o} but in the block table of sequence {s}"
        else:
            why = f"block {b} has refcount {r} but is in {c} block table(s)"
        return AuditFailure(s if s >= 0 else o, "tables", why)
    found.add(n, np.flatnonzero(wrong), describe)


def check_ranges(found: Found, ids, lens, ranges, bm: BlockMap) -> None:
    cs, n = int(bm.block_size), int(bm.owner.size)
    lo, cnt = ranges[:, 0] // cs, -(-ranges[:, 1] // cs)
    ok_range = (ranges[:, 0] % cs == 0) & (lo >= 0) & (lo + cnt <= n) & (lens <= ranges[:, 1])
    found.add(ids.size, np.flatnonzero(~ok_range), lambda i: AuditFailure(
        found.sid(int(ids[i])), "ranges", f"sequence {found.sid(int(ids[i]))}: range "
        f"{int(ranges[i, 0])}+"
        f"{int(ranges[i, 1])} does not fit the map or holds fewer than its {int(lens[i])} "
        "written slots"))
    lo, cnt, seqs = lo[ok_range], cnt[ok_range], ids[ok_range]
    cells = np.repeat(lo, cnt) + np.arange(int(cnt.sum())) - np.repeat(np.cumsum(cnt) - cnt, cnt)
    holder = np.repeat(seqs, cnt)
    cover = np.bincount(cells, minlength=n)
    held_by = np.full(n, FREE, np.int64)
    held_by[cells] = holder
    wrong = (cover > 1) | ((cover == 1) & (bm.owner != held_by)) | (
        (cover == 0) & (bm.owner != FREE))

    def describe(c: int) -> AuditFailure:
        o, s = found.sid(int(bm.owner[c])), found.sid(int(held_by[c]))
        if cover[c] > 1:
            why = f"cell {c} lies in {int(cover[c])} sequences' ranges"
        elif cover[c] == 0:
            why = f"cell {c} is owned by sequence {o} but in no range"
        else:
            why = f"cell {c} lies in the range of sequence {s} but its owner is {o}"
        return AuditFailure(s if s >= 0 else o, "ranges", why)
    found.add(n, np.flatnonzero(wrong), describe)
