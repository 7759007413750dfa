"""Brute-force failure classes from an allocator's BlockMap and configuration alone.

CAPACITY when the free total is below what the allocator would have to place (whole cells or
blocks, buddy's power of two); FRAGMENTATION when it is enough but no start address gives a
placement; None when a placement exists.
"""
from __future__ import annotations

import numpy as np

from kvviz.alloc.base import Admission, Allocator, Reason
from kvviz.core.blockmap import FREE


def _regions(cells: int) -> list[tuple[int, int]]:
    """(base, size) of the buddy regions: powers of two of `cells`, largest first."""
    out, base = [], 0
    for bit in range(cells.bit_length() - 1, -1, -1):
        if cells >> bit & 1:
            out.append((base, 1 << bit))
            base += 1 << bit
    return out


def need_units(alloc: Allocator, need_tokens: int) -> int:
    """Blocks / cells the allocator must place for `need_tokens` slots."""
    units = -(-need_tokens // alloc.block_size)
    if getattr(alloc, "placement", None) == "buddy":
        units = 1 << (units - 1).bit_length()
    return units


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
               for base, size in _regions(free.size) if size >= units)


def brute_class(alloc: Allocator, need_tokens: int) -> Reason | None:
    """None when a placement exists, else CAPACITY or FRAGMENTATION."""
    units = need_units(alloc, need_tokens)
    free = alloc.snapshot().owner == FREE
    if not alloc.contiguous:  # any free block serves
        return None if int(free.sum()) >= units else Reason.CAPACITY
    if placement_exists(free, units, getattr(alloc, "placement", None) == "buddy"):
        return None
    return Reason.CAPACITY if int(free.sum()) < units else Reason.FRAGMENTATION


def assert_refusal_is_exact(alloc: Allocator, adm: Admission, need_tokens: int) -> None:
    units = need_units(alloc, need_tokens)
    assert adm.need_tokens == units * alloc.block_size
    assert adm.free_tokens == int((alloc.snapshot().owner == FREE).sum()) * alloc.block_size
    assert adm.reason is brute_class(alloc, need_tokens)
    assert (adm.reason is Reason.CAPACITY) == (adm.free_tokens < adm.need_tokens)
