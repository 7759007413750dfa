"""The memory verbs for a caller that drives a pool itself, without the scheduler
(kvviz/engine/kvpool.py: Learn's demos, real mode's benchmark, the allocator tests). Each is
the scheduler's own sequence of calls for one request, so the placements are the rule's.
Each is an entry point Python calls with the Pool and Requests tuples; it hands the rule
their records (records.py)."""
from __future__ import annotations

from numba import njit

from kvviz.engine.rule import kv, pool
from kvviz.engine.rule.records import records
from kvviz.engine.rule.state import HIT_TOKENS, QUERY_TOKENS


@njit(cache=True)
def try_admit(p, cfg, req, r, num_tokens):
    """Request r (its req.num_tokens[r] tokens known) starts running with `num_tokens` slots
    written, as schedule() admits the head of the queue: its prefix hits, the admission check
    (no watermark: nothing else is scheduled with it), then allocate_slots. Nothing changes
    when it does not fit. Returns (ok, reason, need, free, largest_hole) in tokens and the
    prefix hits in blocks."""
    q, cf, rq = records(p, cfg, req)
    num_hits = pool.find_longest_cache_hit(q, cf, rq, r, q.hits) if cf.paged else 0
    ok, reason, need, free, largest = kv.check_admission(q, cf, rq, r, num_hits, 0)
    if ok:
        kv.admit(q, cf, rq, r, num_hits, num_tokens)
        if cf.prefix_caching:
            q.c[QUERY_TOKENS] += rq.num_tokens[r]
            q.c[HIT_TOKENS] += num_hits * cf.block_size
    return ok, reason, need, free, largest, num_hits


@njit(cache=True)
def grow_batch(p, cfg, req, rs, n, ok):
    """`n` more slots for each running request of rs, in order, so earlier ones get memory
    first; ok[i]: whether rs[i] grew (a request that did not is unchanged)."""
    q, cf, rq = records(p, cfg, req)
    for i in range(rs.size):
        r = rs[i]
        ok[i] = kv.grow(q, cf, rq, r, q.row_len[rq.row[r]] + n)


@njit(cache=True)
def check(p, cfg, req, r):
    """Whether request r would be admitted now (no prefix, no watermark); changes nothing.
    Returns (ok, reason, need, free, largest_hole) in tokens."""
    q, cf, rq = records(p, cfg, req)
    return kv.check_admission(q, cf, rq, r, 0, 0)


@njit(cache=True)
def release(p, cfg, req, r):
    """Running request r gives back everything it holds (vLLM's free)."""
    q, cf, rq = records(p, cfg, req)
    kv.free(q, cf, rq, r)
