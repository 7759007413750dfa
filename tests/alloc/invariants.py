"""Invariant checks shared by the pool tests: the snapshot, the counters and the compiled
pool's own free lists, each against what the live sequences' lengths imply."""
from __future__ import annotations

import numpy as np

from kvviz.core import metrics
from kvviz.core.blockmap import FREE
from kvviz.engine.kvpool import KVPool
from kvviz.engine.rule import state as S
from tests.alloc.brute import buddy_blocks, holes, regions


def state(pool: KVPool) -> tuple:
    """Everything observable about a pool, comparable with ==."""
    return pool.snapshot(), pool.usage()


def free_queue(pool: KVPool) -> list[int]:
    """The compiled free block queue, the next taken first: plain blocks, then cached, LRU."""
    p = pool.pool
    out = p.free_stack[:p.c[S.NUM_FREE_STACK]][::-1].tolist()
    b = int(p.c[S.LRU_HEAD])
    while b >= 0:
        out.append(b)
        b = int(p.lru_next[b])
    return out


def free_lists(pool: KVPool) -> list[tuple[int, int]]:
    """(start, size) in cells of the compiled contiguous free lists: holes or buddy blocks."""
    p = pool.pool
    if pool.placement != "buddy":
        k = int(p.c[S.NUM_HOLES])
        return list(zip(p.hole_start[:k].tolist(), p.hole_size[:k].tolist()))
    return sorted((int(s), 1 << o) for o in range(p.buddy_count.size)
                  for s in p.buddy_list[p.buddy_off[o]:p.buddy_off[o] + p.buddy_count[o]])


def check_accounting(pool: KVPool) -> None:
    """free + allocated = capacity, and usage() agrees with metrics on the snapshot."""
    m = metrics.compute(pool.snapshot())
    u = pool.usage()
    assert m.used_tokens + m.slack_tokens + m.free_tokens == m.capacity_tokens
    assert u.capacity_tokens == m.capacity_tokens
    assert u.used_tokens == m.used_tokens
    assert u.allocated_tokens == m.used_tokens + m.slack_tokens
    assert u.free_tokens == m.free_tokens
    assert u.cached_tokens == m.cached_tokens
    assert m.cached_tokens <= m.free_tokens


def check_paged(pool: KVPool, lens: dict[int, int]) -> None:
    """Block tables, refcounts, owners, fill levels and the free queue agree with the
    sequences' lengths."""
    bm = pool.snapshot()
    bs = pool.block_size
    holders = np.zeros(bm.num_blocks, np.int64)
    expect_filled: dict[int, int] = {}
    owners_ok: dict[int, set[int]] = {}
    for s, n in lens.items():
        assert pool.seq_len(s) == n
        table = pool.block_table(s)
        assert len(set(table.tolist())) == table.size, f"seq {s} holds a block twice"
        assert table.size == -(-n // bs), f"seq {s} holds other than the blocks it needs"
        assert int(pool.seq_allocated_tokens(np.array([s]))[0]) == table.size * bs
        holders[table] += 1
        for i, b in enumerate(table.tolist()):
            want = max(0, min(n - i * bs, bs))
            assert expect_filled.setdefault(b, want) == want, (
                f"block {b} is shared by sequences that disagree on its content")
            owners_ok.setdefault(b, set()).add(s)
    assert np.array_equal(holders, bm.refcount.astype(np.int64))
    held = holders > 0
    assert np.array_equal(held, bm.owner != FREE)
    for b, seqs in owners_ok.items():
        assert int(bm.owner[b]) in seqs, f"block {b} owner {bm.owner[b]} is not a holder"
        assert int(bm.filled[b]) == expect_filled[b], f"block {b} fill level"
    assert not (bm.cached & held).any(), "a held block is marked cached"
    assert (bm.filled[~held & ~bm.cached] == 0).all(), "a plain free block has fill"
    queue = free_queue(pool)
    assert sorted(queue) == np.flatnonzero(~held).tolist(), "free queue != free blocks"
    assert bm.cached[queue].tolist() == sorted(bm.cached[queue].tolist()), (
        "a cached block sits before a plain one in the free queue")


def check_contiguous(pool: KVPool, lens: dict[int, int]) -> None:
    """Ranges fit, never overlap, cover exactly the owned cells, fill from the start; the
    compiled free lists are the free cells, coalesced (buddy: aligned, buddies merged)."""
    bm = pool.snapshot()
    g = pool.block_size
    ids = np.array(sorted(lens), np.int64)
    expect_owner = np.full(bm.num_blocks, FREE, np.int64)
    expect_filled = np.zeros(bm.num_blocks, np.int64)
    for s, (start, size) in zip(ids.tolist(), pool.ranges(ids).tolist() if ids.size else ()):
        n = lens[s]
        assert pool.seq_len(s) == n
        assert start % g == 0 and size % g == 0
        assert size >= n, f"seq {s}: range of {size} slots holds {n} tokens"
        c0, nc = start // g, size // g
        assert 0 <= c0 and c0 + nc <= bm.num_blocks
        assert (expect_owner[c0 : c0 + nc] == FREE).all(), "ranges overlap"
        expect_owner[c0 : c0 + nc] = s
        expect_filled[c0 : c0 + nc] = np.clip(n - np.arange(nc) * g, 0, g)
        if pool.placement == "buddy":
            base = max(b for b, _ in regions(bm.num_blocks) if b <= c0)
            assert nc & (nc - 1) == 0 and (c0 - base) % nc == 0, "a buddy range is unaligned"
    assert np.array_equal(bm.owner.astype(np.int64), expect_owner)
    assert np.array_equal(bm.filled.astype(np.int64), expect_filled)
    assert (bm.refcount[bm.owner != FREE] == 1).all()
    free = bm.owner == FREE
    want = buddy_blocks(free) if pool.placement == "buddy" else holes(free)
    assert free_lists(pool) == want, "the free lists are not the free cells, coalesced"
    largest = max((size for _, size in want), default=0)
    assert pool.check(1).largest_hole_tokens == largest * g


def check_all(pool: KVPool, lens: dict[int, int]) -> None:
    check_accounting(pool)
    (check_contiguous if pool.contiguous else check_paged)(pool, lens)
    m = metrics.compute(pool.snapshot())
    assert m.tail_waste_tokens <= sum((-n) % pool.block_size for n in lens.values())


def check_empty(pool: KVPool) -> None:
    """After every sequence released: nothing held, refcounts zero, all memory free, the
    free lists whole again."""
    bm = pool.snapshot()
    u = pool.usage()
    assert (bm.owner == FREE).all() and (bm.refcount == 0).all()
    assert u.allocated_tokens == 0 and u.used_tokens == 0
    assert u.free_tokens == u.capacity_tokens
    if pool.contiguous:
        whole = regions(bm.num_blocks) if pool.placement == "buddy" else [(0, bm.num_blocks)]
        assert free_lists(pool) == sorted(whole)
    else:
        assert sorted(free_queue(pool)) == list(range(bm.num_blocks))
