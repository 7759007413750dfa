"""The memory verbs for a caller that drives a pool itself, without the scheduler
(kvviz/engine/kvpool.py: Learn's demos, real mode's benchmark, the allocator tests). Each is
the scheduler's own sequence of calls for one request, so the placements are the rule's."""
from __future__ import annotations

from numba import njit

from kvviz.engine.rule import kv, pool
from kvviz.engine.rule.state import HIT_TOKENS, QUERY_TOKENS


@njit(cache=True)
def try_admit(p, cfg, req, r, num_tokens):
    """Request r (its req.num_tokens[r] tokens known) starts running with `num_tokens` slots
    written, as schedule() admits the head of the queue: its prefix hits, the admission check
    (no watermark: nothing else is scheduled with it), then allocate_slots. Nothing changes
    when it does not fit. Returns (ok, reason, need, free, largest_hole) in tokens and the
    prefix hits in blocks."""
    num_hits = pool.find_longest_cache_hit(p, cfg, req, r, p.hits) if cfg.paged else 0
    ok, reason, need, free, largest = kv.check_admission(p, cfg, req, r, num_hits, 0)
    if ok:
        kv.admit(p, cfg, req, r, num_hits, num_tokens)
        if cfg.prefix_caching:
            p.c[QUERY_TOKENS] += req.num_tokens[r]
            p.c[HIT_TOKENS] += num_hits * cfg.block_size
    return ok, reason, need, free, largest, num_hits


@njit(cache=True)
def grow_batch(p, cfg, req, rs, n, ok):
    """`n` more slots for each running request of rs, in order, so earlier ones get memory
    first; ok[i]: whether rs[i] grew (a request that did not is unchanged)."""
    for i in range(rs.size):
        r = rs[i]
        ok[i] = kv.grow(p, cfg, req, r, p.row_len[req.row[r]] + n)
