"""vLLM's paged block pool (vllm/v1/core/block_pool.py, kv_cache_manager.py), compiled.

The free block queue keeps vLLM's order in two parts: blocks are taken from the front; a
freed block without a hash goes to the front (a request's blocks are freed tail first) and a
freed cached block to the tail, so the queue is always

    front | plain free blocks (`free_stack`, the top taken first) | cached, LRU | tail

and a cached block is evicted only when no plain one is left. `cached_block_hash_to_block`
is an open-addressing table (hash -> the first block cached under it); further blocks with
the same hash (vLLM keeps duplicates) follow it in `dup_next`, in the order they were cached.
A block with ref_cnt 0 is free; a prefix hit on a live block raises its ref_cnt.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from kvviz.engine.rule.hashmap import EMPTY, delete_slot, get_cached_block, slot
from kvviz.engine.rule.keys import ROOT, block_hash
from kvviz.engine.rule.shares import held_changed
from kvviz.engine.rule.state import (
    EVICTIONS,
    KV_LOG_ON,
    LRU_COUNT,
    LRU_HEAD,
    LRU_TAIL,
    NUM_FREE_STACK,
    NUM_HELD,
    NUM_KV_LOG,
    NUM_USED,
)


@njit(cache=True)
def _log(p, kind, h, end, parent):
    """One KV cache event (vLLM's BlockStored / BlockRemoved), while the log is on."""
    i = p.c[NUM_KV_LOG]
    p.kv_kind[i] = kind
    p.kv_hash[i] = h
    p.kv_end[i] = end
    p.kv_parent[i] = parent
    p.c[NUM_KV_LOG] = i + 1


@njit(cache=True)
def cache_block(p, b, h, end, parent):
    """Block b (held) now holds the content hashed h (up to token `end`; `parent`: the hash
    before it, 0 for a first block): vLLM's cache_full_blocks for one block. A block already
    cached under h stays first; b follows it."""
    if p.block_hash[b] == h:
        return
    if p.block_hash[b] != EMPTY:
        forget(p, b)
    if p.c[KV_LOG_ON]:
        _log(p, 1, h, end, parent)
    p.block_hash[b] = h
    p.block_end[b] = end
    p.block_parent[b] = parent
    p.dup_next[b] = -1
    i = slot(p, h)
    if p.hash_keys[i] != h:
        p.hash_keys[i] = h
        p.hash_blocks[i] = b
        return
    x = p.hash_blocks[i]
    while p.dup_next[x] != -1:
        x = p.dup_next[x]
    p.dup_next[x] = b


@njit(cache=True)
def forget(p, b):
    """Block b no longer holds its hash's content (evicted): vLLM's _maybe_evict_cached_block."""
    h = p.block_hash[b]
    if p.c[KV_LOG_ON]:
        _log(p, 2, h, p.block_end[b], EMPTY)
    i = slot(p, h)
    first = p.hash_blocks[i]
    if first == b:
        if p.dup_next[b] == -1:
            delete_slot(p, i)
        else:
            p.hash_blocks[i] = p.dup_next[b]
    else:
        x = first
        while p.dup_next[x] != b:
            x = p.dup_next[x]
        p.dup_next[x] = p.dup_next[b]
    p.block_hash[b] = EMPTY
    p.dup_next[b] = -1


# ---- free_block_queue ----------------------------------------------------------------------
@njit(cache=True)
def num_free_blocks(p):
    return p.c[NUM_FREE_STACK] + p.c[LRU_COUNT]


@njit(cache=True)
def _lru_append(p, b):
    c = p.c
    p.lru_prev[b] = c[LRU_TAIL]
    p.lru_next[b] = -1
    if c[LRU_TAIL] >= 0:
        p.lru_next[c[LRU_TAIL]] = b
    else:
        c[LRU_HEAD] = b
    c[LRU_TAIL] = b
    c[LRU_COUNT] += 1
    p.in_lru[b] = True


@njit(cache=True)
def _lru_remove(p, b):
    c = p.c
    prev, nxt = p.lru_prev[b], p.lru_next[b]
    if prev >= 0:
        p.lru_next[prev] = nxt
    else:
        c[LRU_HEAD] = nxt
    if nxt >= 0:
        p.lru_prev[nxt] = prev
    else:
        c[LRU_TAIL] = prev
    c[LRU_COUNT] -= 1
    p.in_lru[b] = False


@njit(cache=True)
def get_new_block(p):
    """vLLM's get_new_blocks for one block: the queue's front, evicting a cached block only
    when no plain one is left; ref_cnt 1. The caller checked that a block is free."""
    c = p.c
    if c[NUM_FREE_STACK] > 0:
        c[NUM_FREE_STACK] -= 1
        b = p.free_stack[c[NUM_FREE_STACK]]
    else:
        b = np.int32(c[LRU_HEAD])
        _lru_remove(p, b)
        forget(p, b)
        p.content[b] = 0
        c[EVICTIONS] += 1
    p.ref_cnt[b] = 1
    c[NUM_HELD] += 1
    return b


@njit(cache=True)
def touch(p, b):
    """A prefix hit takes block b: out of the free queue if it was cached free (its content
    counts as used again), else one more reference (vLLM's touch)."""
    if p.in_lru[b]:
        _lru_remove(p, b)
        p.c[NUM_USED] += p.content[b]
        p.content[b] = 0
        p.ref_cnt[b] = 1
        p.c[NUM_HELD] += 1
    else:
        p.ref_cnt[b] += 1


@njit(cache=True)
def free_blocks(p, cfg, row):
    """vLLM's KVCacheManager.free: the row's blocks, tail first, each one reference less;
    those nobody holds go back to the queue, a cached one to the tail, a plain one to the
    front (the first freed is taken first)."""
    bs = cfg.block_size
    nb = p.row_num_blocks[row]
    length = p.row_len[row]
    nplain = 0
    held = 0  # blocks that nobody holds any more, and their slots (counters kept in
    used = 0  # locals: a counter in p.c would be re-read after every store into an array)
    for j in range(nb - 1, -1, -1):
        b = p.block_table[row, j]
        p.ref_cnt[b] -= 1
        fill = min(max(length - j * bs, 0), bs)
        if p.ref_cnt[b] > 0:
            continue
        held += 1
        used += fill
        if p.block_hash[b] != EMPTY:
            _lru_append(p, b)
            p.content[b] = fill
        else:
            p.scratch[nplain] = b
            nplain += 1
    p.c[NUM_HELD] -= held
    p.c[NUM_USED] -= used
    top = p.c[NUM_FREE_STACK]
    for k in range(nplain - 1, -1, -1):
        p.free_stack[top] = p.scratch[k]
        top += 1
    p.c[NUM_FREE_STACK] = top
    p.row_num_blocks[row] = 0
    p.row_len[row] = 0
    p.row_num_cached[row] = 0


# ---- prefix hits and slots -----------------------------------------------------------------
@njit(cache=True)
def find_longest_cache_hit(p, cfg, req, r, hits):
    """vLLM's get_computed_blocks: the blocks cached under request r's leading block hashes,
    up to the first miss, never its last known token's block (vLLM recomputes it to sample).
    Writes them into `hits` (and their hashes into p.row_hashes' scratch row); returns
    how many."""
    if not cfg.prefix_caching:
        return 0
    n = (req.num_tokens[r] - 1) // cfg.block_size
    h = ROOT
    k = 0
    scratch = p.row_hashes.shape[0] - 1
    while k < n:
        h = block_hash(cfg, req, r, k, h)
        b = get_cached_block(p, h)
        if b < 0:
            break
        hits[k] = b
        p.row_hashes[scratch, k] = h
        k += 1
    return k


@njit(cache=True)
def blocks_to_allocate(p, cfg, num_tokens, hits, num_hits):
    """Free blocks that admitting a waiting request with `num_tokens` takes: the new blocks
    plus its prefix hits sitting in the free queue (vLLM's get_num_blocks_to_allocate)."""
    need = max(0, -(-num_tokens // cfg.block_size) - num_hits)
    for i in range(num_hits):
        if p.in_lru[hits[i]]:
            need += 1
    return need


@njit(cache=True, inline="always")  # per running request per step
def allocate_slots(p, cfg, req, row, r, num_tokens):
    """vLLM's allocate_slots for running request r (row: its block table): slots up to
    `num_tokens`; False, and nothing changed, when the free blocks do not suffice. Then
    vLLM's cache_blocks: every full block not yet cached is, under its hash."""
    if num_tokens > p.row_num_blocks[row] * cfg.block_size:  # a decode: once a block
        held = p.row_num_blocks[row]
        if not allocate_new_blocks(p, cfg, row, num_tokens):
            return False
        held_changed(p, cfg, req, r, held, p.row_num_blocks[row])
    if num_tokens > p.row_len[row]:
        p.c[NUM_USED] += num_tokens - p.row_len[row]
        p.row_len[row] = num_tokens
    if cfg.prefix_caching and num_tokens >= (p.row_num_cached[row] + 1) * cfg.block_size:
        cache_blocks(p, cfg, req, row, r, num_tokens)  # a block filled up
    return True


@njit(cache=True, inline="always")  # a decode crossing into a new block
def take_plain_block(p, row):
    """allocate_new_blocks for one block while a plain free block is left (get_new_block's
    common case, no eviction): the row's next block. False (none taken) when only cached
    free blocks are left."""
    c = p.c
    if c[NUM_FREE_STACK] == 0:
        return False
    c[NUM_FREE_STACK] -= 1
    b = p.free_stack[c[NUM_FREE_STACK]]
    p.ref_cnt[b] = 1
    c[NUM_HELD] += 1
    held = p.row_num_blocks[row]
    p.block_table[row, held] = b
    p.row_num_blocks[row] = held + 1
    return True


@njit(cache=True)
def allocate_new_blocks(p, cfg, row, num_tokens):
    """The blocks the row lacks for `num_tokens`, from the free queue; False (none taken)
    when there are not enough free."""
    held = p.row_num_blocks[row]
    need = -(-num_tokens // cfg.block_size) - held
    if need > num_free_blocks(p):
        return False
    for k in range(held, held + need):
        p.block_table[row, k] = get_new_block(p)
    p.row_num_blocks[row] = held + need
    return True


@njit(cache=True)
def cache_blocks(p, cfg, req, row, r, num_tokens):
    """vLLM's cache_full_blocks: the row's full blocks up to `num_tokens` not yet cached
    are, each under its hash (chained from the block before)."""
    bs = cfg.block_size
    full = num_tokens // bs
    k = p.row_num_cached[row]
    h = p.row_hashes[row, k - 1] if k else ROOT
    while k < full:
        parent = h if k else EMPTY
        h = block_hash(cfg, req, r, k, h)
        p.row_hashes[row, k] = h
        cache_block(p, p.block_table[row, k], h, (k + 1) * bs, parent)
        k += 1
    p.row_num_cached[row] = max(p.row_num_cached[row], full)


@njit(cache=True)
def take_hits(p, row, hits, num_hits, bs):
    """A new row starts from its prefix hits (their hashes from the scratch row)."""
    scratch = p.row_hashes.shape[0] - 1
    for k in range(num_hits):
        b = hits[k]
        touch(p, b)
        p.block_table[row, k] = b
        p.row_hashes[row, k] = p.row_hashes[scratch, k]
    p.row_num_blocks[row] = num_hits
    p.row_num_cached[row] = num_hits
    p.row_len[row] = num_hits * bs
