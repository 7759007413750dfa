"""Invariant checks shared by the allocator tests (pure reads of public state and snapshots)."""
from __future__ import annotations

import numpy as np

from kvviz.alloc import ContiguousAllocator, PagedAllocator
from kvviz.alloc.base import Allocator
from kvviz.alloc.placement import Buddy
from kvviz.core import metrics
from kvviz.core.blockmap import FREE


def state(alloc: Allocator) -> tuple:
    """Everything observable about an allocator, comparable with ==."""
    return alloc.snapshot(), alloc.usage()


def check_accounting(alloc: Allocator) -> None:
    """free + allocated = capacity, and usage() agrees with metrics on the snapshot."""
    m = metrics.compute(alloc.snapshot())
    u = alloc.usage()
    assert m.used_tokens + m.slack_tokens + m.free_tokens == m.capacity_tokens
    assert u.capacity_tokens == m.capacity_tokens
    assert u.used_tokens == m.used_tokens
    assert u.allocated_tokens == m.used_tokens + m.slack_tokens
    assert u.free_tokens == m.free_tokens
    assert u.cached_tokens == m.cached_tokens
    assert m.cached_tokens <= m.free_tokens


def check_paged(alloc: PagedAllocator, lens: dict[int, int]) -> None:
    """Block tables, refcounts, owners and fill levels agree with the sequences' lengths."""
    bm = alloc.snapshot()
    bs = alloc.block_size
    holders = np.zeros(bm.num_blocks, np.int64)
    expect_filled: dict[int, int] = {}
    owners_ok: dict[int, set[int]] = {}
    for s, n in lens.items():
        assert alloc.seq_len(s) == n
        table = alloc.block_table(s)
        assert len(set(table.tolist())) == table.size, f"seq {s} holds a block twice"
        assert table.size >= -(-n // bs), f"seq {s} holds fewer blocks than its length needs"
        assert int(alloc.seq_allocated_tokens(np.array([s]))[0]) == table.size * bs
        holders[table] += 1
        for i, b in enumerate(table.tolist()):
            want = int(np.clip(n - i * bs, 0, bs))
            assert expect_filled.setdefault(b, want) == want, (
                f"block {b} is shared by sequences that disagree on its content")
            owners_ok.setdefault(b, set()).add(s)
    # no block owned twice unless shared, and the refcount says by how many
    assert np.array_equal(holders, bm.refcount.astype(np.int64))
    held = holders > 0
    assert np.array_equal(held, bm.owner != FREE)
    for b, seqs in owners_ok.items():
        assert int(bm.owner[b]) in seqs, f"block {b} owner {bm.owner[b]} is not a holder"
        assert int(bm.filled[b]) == expect_filled[b], f"block {b} fill level"
    assert not (bm.cached & held).any(), "a held block is marked cached"
    assert (bm.filled[~held & ~bm.cached] == 0).all(), "a plain free block has fill"
    assert (bm.filled <= bs).all() and (bm.filled >= 0).all()


def check_contiguous(alloc: ContiguousAllocator, lens: dict[int, int]) -> None:
    """Ranges fit, never overlap, cover exactly the owned cells, and fill from the start."""
    bm = alloc.snapshot()
    g = alloc.block_size
    ids = np.array(sorted(lens), np.int64)
    expect_owner = np.full(bm.num_blocks, FREE, np.int64)
    expect_filled = np.zeros(bm.num_blocks, np.int64)
    if ids.size:
        rng = alloc.ranges(ids)
        for s, (start, size) in zip(ids.tolist(), rng.tolist()):
            n = lens[s]
            assert alloc.seq_len(s) == n
            assert start % g == 0 and size % g == 0
            assert size >= n, f"seq {s}: range of {size} slots holds {n} tokens"
            c0, nc = start // g, size // g
            assert 0 <= c0 and c0 + nc <= bm.num_blocks
            assert (expect_owner[c0 : c0 + nc] == FREE).all(), "ranges overlap"
            expect_owner[c0 : c0 + nc] = s
            expect_filled[c0 : c0 + nc] = np.clip(n - np.arange(nc) * g, 0, g)
    assert np.array_equal(bm.owner.astype(np.int64), expect_owner)
    assert np.array_equal(bm.filled.astype(np.int64), expect_filled)
    assert (bm.refcount[bm.owner != FREE] == 1).all()
    place = alloc._place
    assert place.free_cells * g == metrics.compute(bm).free_tokens
    if isinstance(place, Buddy):
        check_buddy(place, bm.owner == FREE)
        if ids.size:
            for start, size in alloc.ranges(ids).tolist():
                cells, c0 = size // g, start // g
                assert cells & (cells - 1) == 0, "a buddy range is not a power of two"
                base = max(b for b, _ in place.regions if b <= c0)
                assert (c0 - base) % cells == 0, "a buddy range is not aligned"
    else:
        m = metrics.compute(bm)
        assert np.array_equal(place.starts, metrics.hole_starts(bm)), "hole list is stale"
        assert np.array_equal(place.sizes * g, metrics.hole_sizes(bm)), "holes not coalesced"
        assert alloc.check(1).largest_hole_tokens == m.largest_hole_tokens


def check_buddy(b: Buddy, free_mask: np.ndarray) -> None:
    """Free buddy blocks are aligned to their size, disjoint, cover the free cells, coalesced."""
    cover = np.zeros(free_mask.size, np.int64)
    blocks = b.free_blocks()
    region_of = {}
    for start, size in blocks:
        base, top = max((r for r in b.regions if r[0] <= start), key=lambda r: r[0])
        assert size <= 1 << top
        assert (start - base) % size == 0, f"free block ({start}, {size}) is not aligned"
        assert start + size <= base + (1 << top)
        cover[start : start + size] += 1
        region_of[(start, size)] = (base, top)
    assert (cover <= 1).all(), "free buddy blocks overlap"
    assert np.array_equal(cover == 1, free_mask), "free buddy blocks != free cells"
    free_set = set(blocks)
    for (start, size), (base, top) in region_of.items():
        if size < 1 << top:
            buddy = base + ((start - base) ^ size)
            assert (buddy, size) not in free_set, f"buddies ({start}, {buddy}) of {size} unmerged"


def check_all(alloc: Allocator, lens: dict[int, int]) -> None:
    check_accounting(alloc)
    if isinstance(alloc, PagedAllocator):
        check_paged(alloc, lens)
    else:
        check_contiguous(alloc, lens)
    m = metrics.compute(alloc.snapshot())
    bs = alloc.block_size
    assert m.tail_waste_tokens <= sum((-n) % bs for n in lens.values())


def check_empty(alloc: Allocator) -> None:
    """After every sequence released: nothing held, refcounts zero, all memory free."""
    bm = alloc.snapshot()
    u = alloc.usage()
    assert (bm.owner == FREE).all()
    assert (bm.refcount == 0).all()
    assert u.allocated_tokens == 0 and u.used_tokens == 0
    assert u.free_tokens == u.capacity_tokens
    if isinstance(alloc, ContiguousAllocator):
        place = alloc._place
        if isinstance(place, Buddy):
            assert sorted(place.free_blocks()) == [(b, 1 << o) for b, o in place.regions]
        else:
            assert place.starts.tolist() == [0] and place.sizes.tolist() == [alloc.cells]
