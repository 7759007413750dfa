"""Brute force from a pool's BlockMap and configuration alone: failure classes, the free
buddy blocks, and where each placement puts a new range.

CAPACITY when the free total is below what the pool would have to place (whole cells or
blocks, buddy's power of two); FRAGMENTATION when it is enough but no start address gives a
placement; None when a placement exists.
"""
from __future__ import annotations

import numpy as np

from kvviz.core.admission import Admission, Reason
from kvviz.core.blockmap import FREE
from kvviz.engine.kvpool import KVPool


def regions(cells: int) -> list[tuple[int, int]]:
    """(base, size) of the buddy regions: powers of two of `cells`, largest first."""
    out, base = [], 0
    for bit in range(cells.bit_length() - 1, -1, -1):
        if cells >> bit & 1:
            out.append((base, 1 << bit))
            base += 1 << bit
    return out


def need_units(pool: KVPool, need_tokens: int) -> int:
    """Blocks / cells the pool must place for `need_tokens` slots."""
    units = -(-need_tokens // pool.block_size)
    if pool.placement == "buddy":
        units = 1 << (units - 1).bit_length()
    return units


def buddy_blocks(free: np.ndarray) -> list[tuple[int, int]]:
    """(start, size) of the free buddy blocks when buddies are always merged: each region
    split in halves until a half is wholly free (taken whole) or wholly held."""
    out: list[tuple[int, int]] = []

    def split(start: int, size: int) -> None:
        part = free[start:start + size]
        if part.all():
            out.append((start, size))
        elif part.any():
            split(start, size // 2)
            split(start + size // 2, size // 2)

    for base, size in regions(free.size):
        split(base, size)
    return sorted(out)


def holes(free: np.ndarray) -> list[tuple[int, int]]:
    """(start, size) of every maximal run of free cells, by address."""
    edges = np.diff(np.concatenate([[0], free.astype(np.int8), [0]]))
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    return list(zip(starts.tolist(), (ends - starts).tolist()))


def placement(pool: KVPool, units: int) -> int | None:
    """The first cell a new range of `units` cells gets: first-fit the first hole by address
    that holds it, best-fit the smallest (the first of equals), buddy the lowest free block
    of the smallest size that holds it; None when none does."""
    free = pool.snapshot().owner == FREE
    if pool.placement == "buddy":
        fits = [(size, start) for start, size in buddy_blocks(free) if size >= units]
    elif pool.placement == "best-fit":
        fits = [(size, start) for start, size in holes(free) if size >= units]
    else:
        fits = [(start, start) for start, size in holes(free) if size >= units]
    return min(fits)[1] if fits else None


def placement_exists(free: np.ndarray, units: int, buddy: bool) -> bool:
    """Try every start address: is some window of `units` cells all free? (buddy: only
    starts aligned to `units` inside one region). `free`: bool per cell / block."""
    if units > free.size:
        return False
    runs = np.concatenate([[0], np.cumsum(free, dtype=np.int64)])
    whole = runs[units:] - runs[:-units] == units  # whole[s]: cells s..s+units-1 all free
    if not buddy:
        return bool(whole.any())
    return any(whole[base : base + size - units + 1 : units].any()
               for base, size in regions(free.size) if size >= units)


def brute_class(pool: KVPool, need_tokens: int) -> Reason | None:
    """None when a placement exists, else CAPACITY or FRAGMENTATION."""
    units = need_units(pool, need_tokens)
    free = pool.snapshot().owner == FREE
    if not pool.contiguous:  # any free block serves
        return None if int(free.sum()) >= units else Reason.CAPACITY
    if placement_exists(free, units, pool.placement == "buddy"):
        return None
    return Reason.CAPACITY if int(free.sum()) < units else Reason.FRAGMENTATION


def assert_refusal_is_exact(pool: KVPool, adm: Admission, need_tokens: int) -> None:
    units = need_units(pool, need_tokens)
    assert adm.need_tokens == units * pool.block_size
    assert adm.free_tokens == int((pool.snapshot().owner == FREE).sum()) * pool.block_size
    assert adm.reason is brute_class(pool, need_tokens)
    assert (adm.reason is Reason.CAPACITY) == (adm.free_tokens < adm.need_tokens)
