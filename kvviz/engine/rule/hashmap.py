"""vLLM's cached_block_hash_to_block (vllm/v1/core/block_pool.py), compiled: an
open-addressing table over the pool's hash_keys / hash_blocks (hash -> the first block
cached under it; 0: an empty slot), linear probing, deletion by shifting back (no
tombstones). pool.py keeps the further blocks of a hash in dup_next."""
from __future__ import annotations

import numpy as np
from numba import njit

EMPTY = np.uint64(0)


@njit(cache=True)
def slot(p, h):
    mask = p.hash_keys.size - 1
    i = np.int64(h & np.uint64(mask))
    while p.hash_keys[i] != EMPTY and p.hash_keys[i] != h:
        i = (i + 1) & mask
    return i


@njit(cache=True)
def get_cached_block(p, h):
    """The first block cached under hash h, or -1."""
    i = slot(p, h)
    return np.int64(p.hash_blocks[i]) if p.hash_keys[i] == h else np.int64(-1)


@njit(cache=True)
def delete_slot(p, i):
    """Empty slot i, shifting later entries of its probe run back (no tombstones)."""
    keys, mask = p.hash_keys, p.hash_keys.size - 1
    j = i
    while True:
        keys[i] = EMPTY
        while True:
            j = (j + 1) & mask
            if keys[j] == EMPTY:
                return
            home = np.int64(keys[j] & np.uint64(mask))
            if (j > i and (home <= i or home > j)) or (j < i and home <= i and home > j):
                break
        keys[i] = keys[j]
        p.hash_blocks[i] = p.hash_blocks[j]
        i = j
