"""A prefix-caching lane's waiting head over a span of decodes (kvviz/engine/span.py).

The head of the queue, refused at the last step, gets the same answer at each next step of a
span while its prefix hits and its need stay as they are and the free blocks stay on the same
side of that need. A decode's newly full block is keyed by its own request's tokens (its end
lies past the prompt, so past the prompt's shared chain: kvviz/engine/tokens.py), so no decode
adds a hit for the head; a hit goes only when a take evicts it, and takes evict the least
recently freed cached block first (kvviz/alloc/blockpool.py). So a span may take the plain
free blocks and the cached ones older than the head's oldest cached-free hit. A head refused
for CAPACITY (need > free) stays so whatever is evicted: each take lowers free by one and the
need by at most one (an evicted hit whose key a live block also holds), so need - free never
falls.
"""
from __future__ import annotations

import numpy as np

from kvviz.engine.kvspace import decode_reach


def head_hold(space, r: int, total: int, lens: np.ndarray, m: int) -> tuple[int, int]:
    """For `Scheduler.quiet_steps`, waiting request r with `total` known tokens in a
    PagedSpace that caches prefixes, before a span of at most m decodes of the running
    requests (lens: slots each holds): (the fewest free blocks that keep its answer, its
    need net of its hits if it fits now, as `PagedSpace.answer_floor`; m, cut where the
    span's takes would evict one of its hits: that matters only while it fits)."""
    alloc = space.alloc
    hits, _ = space.hits(r, total)
    need = alloc.blocks_to_allocate(r, total, hits)
    if need > alloc.free_blocks:  # CAPACITY stays (see above)
        return 0, m
    pool = alloc.block_pool
    cached = [b for b in hits if pool.is_cached(b)]
    cap = alloc.plain_free_blocks + (pool.lru.older(cached) if cached else pool.lru.n)
    return need, min(m, decode_reach(lens, space.bs, cap))
