"""Allocators behind one interface (kvviz.alloc.base). No torch here."""
from __future__ import annotations

from kvviz.alloc.base import Admission, Allocator, PrefixKey, Reason, Usage
from kvviz.alloc.contiguous import ContiguousAllocator
from kvviz.alloc.paged import PagedAllocator

__all__ = [
    "Admission", "Allocator", "ContiguousAllocator", "PagedAllocator", "PrefixKey", "Reason",
    "Usage", "make_allocator",
]


def make_allocator(spec, capacity_tokens: int, bytes_per_token: int = 0) -> Allocator:
    """Build the allocator a LaneSpec names, over `capacity_tokens` slots."""
    if spec.allocator == "paged":
        nb = capacity_tokens // spec.block_size
        if nb < 1:
            raise ValueError(
                f"capacity_tokens: {capacity_tokens} is below one block of {spec.block_size}")
        return PagedAllocator(nb, spec.block_size, prefix_caching=spec.prefix_caching,
                              bytes_per_token=bytes_per_token, label=spec.label)
    return ContiguousAllocator(capacity_tokens, spec.placement, cell_tokens=spec.block_size,
                               bytes_per_token=bytes_per_token, label=spec.label)
