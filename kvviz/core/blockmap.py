"""BlockMap: one frozen picture of an allocator at one instant.

Arrays are in physical address order, one entry per block (paged) or per cell of a fixed
number of slots (contiguous). Everything the dashboard draws derives from BlockMaps + events.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

FREE = -1


@dataclass(frozen=True, eq=False)
class BlockMap:
    owner: np.ndarray  # int32 [n], sequence id or FREE (-1)
    filled: np.ndarray  # int32 [n], slots written, 0..block_size
    allocated: np.ndarray  # int32 [n], slots reserved for the owner (0 when free)
    refcount: np.ndarray  # int16 [n], sequences referencing the block
    cached: np.ndarray  # bool [n], free but holding reusable prefix content
    block_size: int  # slots per block (cell size for a contiguous allocator)
    bytes_per_token: int
    label: str  # allocator label, e.g. "paged:16" or "contiguous:first-fit:max"
    contiguous: bool  # True when a placement needs adjacent free slots
    # Known final lengths (simulation): final_len[i] is the length sequence final_seq[i]
    # will reach. Lets metrics split slack into reserved vs internal. Both or neither.
    final_seq: np.ndarray | None = field(default=None)  # int32 [m]
    final_len: np.ndarray | None = field(default=None)  # int32 [m]
    # Slots each of those sequences holds, shared blocks counted for every holder (optional;
    # without it shared blocks count for their owner only).
    final_held: np.ndarray | None = field(default=None)  # int64 [m]
    buddy: bool = False  # placements are aligned power-of-two blocks (buddy allocator)
    # Paged lanes, optional: the block tables of the final_seq sequences, in that order.
    # table_len[i] blocks for final_seq[i]; table_blocks holds the tables one after another,
    # each in logical order (the store keeps them in its block_tables table).
    table_len: np.ndarray | None = field(default=None)  # int32 [m]
    table_blocks: np.ndarray | None = field(default=None)  # int32 [sum(table_len)]

    def __post_init__(self) -> None:
        n = self.owner.shape[0]
        for name, dtype in (
            ("owner", np.int32),
            ("filled", np.int32),
            ("allocated", np.int32),
            ("refcount", np.int16),
            ("cached", np.bool_),
        ):
            arr = getattr(self, name)
            if arr.shape != (n,):
                raise ValueError(f"BlockMap.{name} has shape {arr.shape}, expected ({n},)")
            if arr.dtype != dtype:
                object.__setattr__(self, name, arr.astype(dtype))
        if (self.final_seq is None) != (self.final_len is None):
            raise ValueError("BlockMap.final_seq and final_len must be given together")
        if self.final_seq is not None and self.final_seq.shape != self.final_len.shape:
            raise ValueError("BlockMap.final_seq and final_len differ in shape")
        if self.block_size < 1:
            raise ValueError(f"BlockMap.block_size must be >= 1, got {self.block_size}")

    @property
    def num_blocks(self) -> int:
        return int(self.owner.shape[0])

    @property
    def capacity_tokens(self) -> int:
        return self.num_blocks * self.block_size

    @property
    def is_free(self) -> np.ndarray:
        return self.owner == FREE

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, BlockMap):
            return NotImplemented
        return (
            self.block_size == other.block_size
            and self.label == other.label
            and self.contiguous == other.contiguous
            and self.bytes_per_token == other.bytes_per_token
            and all(
                np.array_equal(getattr(self, k), getattr(other, k))
                for k in ("owner", "filled", "allocated", "refcount", "cached")
            )
        )


def empty_blockmap(
    num_blocks: int, block_size: int, *, label: str = "", contiguous: bool = False,
    bytes_per_token: int = 0,
) -> BlockMap:
    """An all-free map, handy for tests and for the Learn page."""
    return BlockMap(
        owner=np.full(num_blocks, FREE, np.int32),
        filled=np.zeros(num_blocks, np.int32),
        allocated=np.zeros(num_blocks, np.int32),
        refcount=np.zeros(num_blocks, np.int16),
        cached=np.zeros(num_blocks, np.bool_),
        block_size=block_size,
        bytes_per_token=bytes_per_token,
        label=label,
        contiguous=contiguous,
    )
