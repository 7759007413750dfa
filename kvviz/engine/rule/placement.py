"""Contiguous placements, compiled: kvviz's own (vLLM has no contiguous allocator).

A request holds one range of cells. First-fit and best-fit keep the free holes sorted by
address (`hole_start`, `hole_size`; coalescing on free; best-fit takes the smallest hole
that fits, the first of equals). Buddy keeps power-of-two blocks per order, splitting on
place (the lower half is used) and merging buddies on free, inside top-level regions that
are the binary decomposition of the cells, largest first:

    8 cells: [0 1 2 3 4 5 6 7]  place(3) -> order 2: [0..3] used, [4..7] free
    free [0..3] -> its buddy [4..7] is free -> merged back into [0..7]
"""
from __future__ import annotations

import numpy as np
from numba import njit

from kvviz.engine.rule.state import BEST_FIT, BUDDY, HELD_CELLS, NUM_HOLES


@njit(cache=True)
def order_of(n):
    """The buddy order of n cells: the smallest k with 2^k >= n."""
    k = 0
    while (np.int64(1) << k) < n:
        k += 1
    return k


@njit(cache=True)
def cells_for(cfg, tokens):
    """Cells a range of `tokens` slots takes (a power of two of them for buddy)."""
    cells = -(-tokens // cfg.block_size)
    return np.int64(1) << order_of(cells) if cfg.placement == BUDDY else cells


@njit(cache=True)
def largest_hole(p, cfg):
    if cfg.placement == BUDDY:
        for o in range(p.buddy_count.size - 1, -1, -1):
            if p.buddy_count[o]:
                return np.int64(1) << o
        return np.int64(0)
    best = np.int64(0)
    for i in range(p.c[NUM_HOLES]):
        best = max(best, p.hole_size[i])
    return best


@njit(cache=True)
def free_cells(p, cfg):
    return cfg.num_blocks - p.c[HELD_CELLS]


# ---- hole list -----------------------------------------------------------------------------
@njit(cache=True)
def _take_hole(p, i, n):
    k = p.c[NUM_HOLES]
    if p.hole_size[i] == n:
        p.hole_start[i:k - 1] = p.hole_start[i + 1:k].copy()
        p.hole_size[i:k - 1] = p.hole_size[i + 1:k].copy()
        p.c[NUM_HOLES] = k - 1
    else:
        p.hole_start[i] += n
        p.hole_size[i] -= n


@njit(cache=True)
def _bisect(a, k, x):
    lo, hi = 0, k
    while lo < hi:
        mid = (lo + hi) // 2
        if a[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(cache=True)
def _free_hole(p, start, n):
    k = p.c[NUM_HOLES]
    st, sz = p.hole_start, p.hole_size
    j = _bisect(st, k, start)
    merge_prev = j > 0 and st[j - 1] + sz[j - 1] == start
    merge_next = j < k and start + n == st[j]
    if merge_prev and merge_next:
        sz[j - 1] += n + sz[j]
        st[j:k - 1] = st[j + 1:k].copy()
        sz[j:k - 1] = sz[j + 1:k].copy()
        p.c[NUM_HOLES] = k - 1
    elif merge_prev:
        sz[j - 1] += n
    elif merge_next:
        st[j] = start
        sz[j] += n
    else:
        st[j + 1:k + 1] = st[j:k].copy()
        sz[j + 1:k + 1] = sz[j:k].copy()
        st[j] = start
        sz[j] = n
        p.c[NUM_HOLES] = k + 1


# ---- buddy lists ---------------------------------------------------------------------------
@njit(cache=True)
def _buddy_insert(p, o, start):
    off, k = p.buddy_off[o], p.buddy_count[o]
    lst = p.buddy_list[off:off + k + 1]
    j = _bisect(lst, k, start)
    lst[j + 1:k + 1] = lst[j:k].copy()
    lst[j] = start
    p.buddy_count[o] = k + 1


@njit(cache=True)
def _buddy_remove_at(p, o, j):
    off, k = p.buddy_off[o], p.buddy_count[o]
    lst = p.buddy_list[off:off + k]
    lst[j:k - 1] = lst[j + 1:k].copy()
    p.buddy_count[o] = k - 1


@njit(cache=True)
def _buddy_place(p, k):
    top = p.buddy_count.size
    j = k
    while j < top and p.buddy_count[j] == 0:
        j += 1
    if j >= top:
        return np.int64(-1)
    start = p.buddy_list[p.buddy_off[j]]
    _buddy_remove_at(p, j, 0)
    while j > k:  # split, keeping the lower half, freeing the upper
        j -= 1
        _buddy_insert(p, j, start + (np.int64(1) << j))
    return start


@njit(cache=True)
def _buddy_free(p, start, k):
    reg = p.buddy_region
    i = reg.shape[0] - 1
    while reg[i, 0] > start:
        i -= 1
    base, top = reg[i, 0], reg[i, 1]
    while k < top:
        buddy = base + ((start - base) ^ (np.int64(1) << k))
        off, cnt = p.buddy_off[k], p.buddy_count[k]
        j = _bisect(p.buddy_list[off:off + cnt], cnt, buddy)
        if j == cnt or p.buddy_list[off + j] != buddy:
            break
        _buddy_remove_at(p, k, j)
        start = min(start, buddy)
        k += 1
    _buddy_insert(p, k, start)


# ---- the verbs -----------------------------------------------------------------------------
@njit(cache=True)
def place(p, cfg, cells):
    """A range of `cells` cells (already rounded): its first cell, or -1 when no hole fits."""
    if cfg.placement == BUDDY:
        start = _buddy_place(p, order_of(cells))
    else:
        k = p.c[NUM_HOLES]
        i = -1
        if cfg.placement == BEST_FIT:
            best = np.int64(0)
            for x in range(k):
                s = p.hole_size[x]
                if s >= cells and (i < 0 or s < best):
                    i, best = x, s
                    if s == cells:
                        break
        else:
            for x in range(k):
                if p.hole_size[x] >= cells:
                    i = x
                    break
        if i < 0:
            return np.int64(-1)
        start = p.hole_start[i]
        _take_hole(p, i, cells)
    if start >= 0:
        p.c[HELD_CELLS] += cells
    return start


@njit(cache=True)
def grow_in_place(p, cfg, start, size, extra):
    """Extend [start, start + size) by `extra` cells if the next hole allows (never buddy)."""
    if cfg.placement == BUDDY:
        return False
    end = start + size
    k = p.c[NUM_HOLES]
    j = _bisect(p.hole_start, k, end)
    if j < k and p.hole_start[j] == end and p.hole_size[j] >= extra:
        _take_hole(p, j, extra)
        p.c[HELD_CELLS] += extra
        return True
    return False


@njit(cache=True)
def release_range(p, cfg, start, size):
    if cfg.placement == BUDDY:
        _buddy_free(p, start, order_of(size))
    else:
        _free_hole(p, start, size)
    p.c[HELD_CELLS] -= size
