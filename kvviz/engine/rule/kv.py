"""KV memory as the scheduler sees it, compiled: one small interface over both layouts.

Paged lanes are vLLM's KVCacheManager over the block pool (pool.py): prefix hits of whole
cached blocks, the blocks an admission or a growth takes, the watermark. Contiguous lanes are
kvviz's own (placement.py): one range per request, reserved at admission (max(num_tokens,
its reservation)) and grown in place. Every running request holds a row: its block table
(paged) or its range (contiguous).
"""
from __future__ import annotations

from numba import njit

from kvviz.engine.rule import placement, pool
from kvviz.engine.rule.shares import held_changed
from kvviz.engine.rule.state import (
    NUM_FREE_ROWS,
    NUM_USED,
    R_CAPACITY,
    R_FRAGMENTATION,
    R_NONE,
    R_POLICY,
)


@njit(cache=True)
def new_row(p, req, r):
    p.c[NUM_FREE_ROWS] -= 1
    row = p.free_rows[p.c[NUM_FREE_ROWS]]
    p.row_seq[row] = r
    req.row[r] = row
    return row


@njit(cache=True)
def _drop_row(p, req, r):
    row = req.row[r]
    p.row_seq[row] = -1
    req.row[r] = -1
    p.free_rows[p.c[NUM_FREE_ROWS]] = row
    p.c[NUM_FREE_ROWS] += 1


@njit(cache=True)
def free_slots(p, cfg):
    """Free token slots (vLLM's free blocks, or free cells, times their size)."""
    if cfg.paged:
        return pool.num_free_blocks(p) * cfg.block_size
    return placement.free_cells(p, cfg) * cfg.block_size


@njit(cache=True)
def check_admission(p, cfg, req, r, num_hits, running):
    """Whether waiting request r fits with all its known tokens (vLLM checks the whole
    sequence, not the chunk; the watermark waived while nothing runs). Returns (ok, reason,
    need_tokens, free_tokens, largest_hole_tokens)."""
    total = req.num_tokens[r]
    bs = cfg.block_size
    if cfg.paged:
        need = pool.blocks_to_allocate(p, cfg, total, p.hits, num_hits)
        free = pool.num_free_blocks(p)
        keep = 0 if running == 0 else cfg.watermark_blocks
        if need + keep <= free:
            return True, R_NONE, need * bs, free * bs, free * bs
        return False, R_CAPACITY if need > free else R_POLICY, need * bs, free * bs, free * bs
    cells = placement.cells_for(cfg, max(total, req.reserve[r]))
    largest = placement.largest_hole(p, cfg)
    free = placement.free_cells(p, cfg)
    if largest >= cells:
        return True, R_NONE, cells * bs, free * bs, largest * bs
    reason = R_CAPACITY if free < cells else R_FRAGMENTATION
    return False, reason, cells * bs, free * bs, largest * bs


@njit(cache=True)
def check_whole(p, cfg, whole):
    """The refusal of a request whose whole life (`whole` slots) exceeds the capacity."""
    bs = cfg.block_size
    if cfg.paged:
        free = pool.num_free_blocks(p) * bs
        return R_CAPACITY, -(-whole // bs) * bs, free, free
    cells = placement.cells_for(cfg, whole)
    free = placement.free_cells(p, cfg)
    reason = R_CAPACITY if free < cells else R_FRAGMENTATION
    return reason, cells * bs, free * bs, placement.largest_hole(p, cfg) * bs


@njit(cache=True)
def admit(p, cfg, req, r, num_hits, num_tokens):
    """Waiting request r starts running with `num_tokens` slots written, its first
    num_hits blocks the prefix hits in p.hits (the caller checked that it fits)."""
    row = new_row(p, req, r)
    if cfg.paged:
        pool.take_hits(p, row, p.hits, num_hits, cfg.block_size)
        held_changed(p, cfg, req, r, 0, num_hits)
        pool.allocate_slots(p, cfg, req, row, r, num_tokens)
        return
    cells = placement.cells_for(cfg, max(req.num_tokens[r], req.reserve[r]))
    p.row_start[row] = placement.place(p, cfg, cells)
    p.row_num_blocks[row] = cells
    held_changed(p, cfg, req, r, 0, cells)
    p.row_len[row] = num_tokens
    p.c[NUM_USED] += num_tokens


@njit(cache=True, inline="always")  # per running request per step
def grow_within(p, cfg, req, r, row, num_tokens, caching):
    """grow's common case, a decode: the slots up to `num_tokens` lie in the blocks (cells)
    the row holds (`row`: r's), or (paged) in one more block off the plain free blocks; and
    no block fills up that prefix caching would register (`caching`: cfg.paged and
    cfg.prefix_caching). Writes them and returns how many are new, for the caller to add
    to c[NUM_USED]; -1, nothing changed, where grow must run."""
    if caching and num_tokens >= (p.row_num_cached[row] + 1) * cfg.block_size:
        return -1  # a block fills up: cache_blocks registers it
    held = p.row_num_blocks[row]
    if num_tokens > held * cfg.block_size:
        if (not cfg.paged or num_tokens > (held + 1) * cfg.block_size
                or not pool.take_plain_block(p, row)):
            return -1
        held_changed(p, cfg, req, r, held, held + 1)
    extra = num_tokens - p.row_len[row]
    if extra <= 0:
        return 0
    p.row_len[row] = num_tokens
    return extra


@njit(cache=True, inline="always")
def grow(p, cfg, req, r, num_tokens):
    """Slots up to `num_tokens` for running request r; False (nothing changed) if memory
    does not suffice (vLLM's allocate_slots returning None)."""
    row = req.row[r]
    if cfg.paged:
        return pool.allocate_slots(p, cfg, req, row, r, num_tokens)
    extra = num_tokens - p.row_len[row]
    if extra <= 0:
        return True
    size = p.row_num_blocks[row]
    if num_tokens > size * cfg.block_size:  # past the range's last cell
        more = -(-num_tokens // cfg.block_size) - size
        if not placement.grow_in_place(p, cfg, p.row_start[row], size, more):
            return False
        p.row_num_blocks[row] = size + more
        held_changed(p, cfg, req, r, size, size + more)
    p.row_len[row] = num_tokens
    p.c[NUM_USED] += extra
    return True


@njit(cache=True)
def free(p, cfg, req, r):
    """Request r gives back everything it holds (finished or preempted)."""
    row = req.row[r]
    held_changed(p, cfg, req, r, p.row_num_blocks[row], 0)
    if cfg.paged:
        pool.free_blocks(p, cfg, row)
    else:
        placement.release_range(p, cfg, p.row_start[row], p.row_num_blocks[row])
        p.c[NUM_USED] -= p.row_len[row]
        p.row_num_blocks[row] = 0
        p.row_len[row] = 0
    _drop_row(p, req, r)
