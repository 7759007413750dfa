"""Fragmentation metrics: pure functions of a BlockMap (no allocator internals).

For capacity C slots:  used + slack + free = C  (slack = allocated but not written).
When final lengths are known, slack = reserved (will be written) + internal (never written).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from kvviz.core.blockmap import FREE, BlockMap


class Metrics(NamedTuple):
    capacity_tokens: int
    used_tokens: int  # KV written by live sequences, shared blocks counted once
    slack_tokens: int  # allocated, not yet written
    free_tokens: int  # in free blocks (cached-free included: evictable on demand)
    cached_tokens: int  # free blocks still holding reusable prefix content
    reserved_tokens: int | None  # part of slack that will be written (final lengths known)
    internal_tokens: int | None  # part of slack that never will be
    hole_count: int  # runs of adjacent free blocks in address order
    largest_hole_tokens: int
    external_frag_index: float  # 1 - largest placeable / free; 0 when any block serves
    tail_waste_tokens: int  # unwritten slots in partly written blocks (last blocks)
    shared_savings_tokens: int  # slots that sharing saved: sum (refcount - 1) * filled
    live_sequences: int

    def share(self, tokens: int | None) -> float:
        return 0.0 if tokens is None or self.capacity_tokens == 0 else tokens / self.capacity_tokens

    def as_dict(self) -> dict[str, float | int | None]:
        return self._asdict()


def _hole_edges(bm: BlockMap) -> tuple[np.ndarray, np.ndarray]:
    """(first block, one past the last block) of every maximal run of free blocks."""
    free = np.empty(bm.num_blocks + 2, np.int8)
    free[0] = free[-1] = 0
    np.equal(bm.owner, FREE, out=free[1:-1].view(np.bool_))
    edges = np.diff(free)
    return np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)


def hole_sizes(bm: BlockMap) -> np.ndarray:
    """Sizes in slots of every maximal run of free blocks, in address order (int64)."""
    starts, ends = _hole_edges(bm)
    return (ends - starts).astype(np.int64) * bm.block_size


def hole_starts(bm: BlockMap) -> np.ndarray:
    return _hole_edges(bm)[0]


def hole_histogram(bm: BlockMap, max_pow2: int = 20) -> tuple[np.ndarray, np.ndarray]:
    """Counts of holes by size bucket [2^k, 2^(k+1)) slots; returns (bucket_lo, counts)."""
    sizes = hole_sizes(bm)
    lo = 2 ** np.arange(max_pow2 + 1, dtype=np.int64)
    idx = np.clip(np.floor(np.log2(np.maximum(sizes, 1))).astype(np.int64), 0, max_pow2)
    return lo, np.bincount(idx, minlength=max_pow2 + 1)


def tail_waste_tokens(bm: BlockMap) -> int:
    gap = bm.allocated - bm.filled  # > 0 only on owned blocks not fully written
    partial = (bm.filled > 0) & (gap > 0)
    return int(gap[partial].sum(dtype=np.int64))


def dense_ids(*ids: np.ndarray) -> tuple[list[np.ndarray], int]:
    """Map sequence ids to 0..n-1 (same id, same index) across arrays; returns (indices, n).

    Cost is bounded by the number of ids, not by the largest id (ids keep growing under
    --loop): an offset by the smallest id when the ids are dense, else a sort.
    """
    flat = [np.asarray(a, np.int64).ravel() for a in ids]
    sizes = [a.size for a in flat]
    total = sum(sizes)
    if total == 0:
        return [np.zeros(0, np.int64) for _ in flat], 0
    lo = min(int(a.min()) for a in flat if a.size)
    hi = max(int(a.max()) for a in flat if a.size)
    if hi - lo < 4 * total + 1024:
        return [a - lo for a in flat], hi - lo + 1
    uniq, inv = np.unique(np.concatenate(flat), return_inverse=True)
    return np.split(inv, np.cumsum(sizes)[:-1]), int(uniq.size)


def slack_split(bm: BlockMap) -> tuple[int, int] | None:
    """(reserved, internal) when the map carries final lengths, else None."""
    if bm.final_seq is None or bm.final_len is None:
        return None
    owned = bm.owner != FREE
    owners = bm.owner[owned].astype(np.int64)
    slack = int((bm.allocated[owned] - bm.filled[owned]).sum())
    if owners.size == 0:
        return 0, 0
    if bm.final_held is not None:  # exact: what each sequence holds beyond its final length
        internal = int(np.maximum(0, bm.final_held - bm.final_len).sum())
        return slack - internal, internal
    (owners, finals), n = dense_ids(owners, bm.final_seq)
    alloc = np.bincount(owners, weights=bm.allocated[owned], minlength=n)
    written = np.bincount(owners, weights=bm.filled[owned], minlength=n)
    final = np.zeros(n, np.float64)
    final[finals] = bm.final_len
    live = np.flatnonzero(np.bincount(owners, minlength=n))
    # A sequence never writes past its final length: what it holds beyond that is internal.
    internal = np.maximum(0.0, alloc[live] - np.maximum(final[live], written[live])).sum()
    return slack - int(internal), int(internal)


def live_sequences(bm: BlockMap) -> int:
    """Distinct owners (a scatter into a scratch mask sized by the id span, not the max id)."""
    owners = bm.owner[bm.owner != FREE]
    if owners.size == 0:
        return 0
    (idx,), n = dense_ids(owners)
    seen = np.zeros(n, np.bool_)
    seen[idx] = True
    return int(np.count_nonzero(seen))


def largest_buddy_block(bm: BlockMap) -> int:
    """Largest aligned, wholly free power-of-two block (what a buddy allocator can place)."""
    free = bm.owner == FREE
    n, base, best = bm.num_blocks, 0, 0
    for order in range(n.bit_length() - 1, -1, -1):  # regions: binary decomposition of n
        if not n >> order & 1:
            continue
        region = free[base : base + (1 << order)]
        base += 1 << order
        for j in range(order, -1, -1):
            if (1 << j) <= best:
                break
            if region.reshape(-1, 1 << j).all(axis=1).any():
                best = 1 << j
                break
    return best * bm.block_size


def compute(bm: BlockMap) -> Metrics:
    owned = bm.owner != FREE
    free_blocks = bm.num_blocks - int(np.count_nonzero(owned))
    # free blocks have filled == allocated == 0 except cached ones (filled = content)
    used = int(bm.filled.sum(dtype=np.int64)) - int(bm.filled[bm.cached].sum(dtype=np.int64))
    allocated = int(bm.allocated.sum(dtype=np.int64))
    free = free_blocks * bm.block_size
    holes = hole_sizes(bm)
    largest = int(holes.max()) if holes.size else 0
    if bm.buddy:
        largest = largest_buddy_block(bm)
    if bm.contiguous:
        efi = 0.0 if free == 0 else 1.0 - largest / free
    else:
        efi = 0.0  # any free block serves a paged request: no external fragmentation
    split = slack_split(bm)
    shared = owned & (bm.refcount > 1)
    return Metrics(
        capacity_tokens=bm.capacity_tokens,
        used_tokens=used,
        slack_tokens=allocated - used,
        free_tokens=free,
        cached_tokens=int(bm.cached.sum()) * bm.block_size,
        reserved_tokens=None if split is None else split[0],
        internal_tokens=None if split is None else split[1],
        hole_count=int(holes.size),
        largest_hole_tokens=largest,
        external_frag_index=float(efi),
        tail_waste_tokens=tail_waste_tokens(bm),
        shared_savings_tokens=int(((bm.refcount[shared] - 1) * bm.filled[shared]).sum()),
        live_sequences=live_sequences(bm),
    )
