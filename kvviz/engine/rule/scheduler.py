"""vLLM 0.32's v1 Scheduler (vllm/v1/core/sched/scheduler.py), compiled: FCFS, recompute
preemption, synchronous scheduling, no speculative decoding.

Each request has num_tokens (prompt + tokens sampled so far) and num_computed_tokens (tokens
whose KV is written). One engine step is

  schedule()  the token budget (max_num_batched_tokens) pays the running requests first, in
              order: each computes num_tokens - num_computed_tokens tokens (one for a
              decode, a chunk of its prompt while prefilling). A request whose slots cannot
              be allocated preempts the last running request (its blocks freed, computed
              reset to 0, back to the front of the waiting queue) until it fits or preempts
              itself. Then, if nobody was preempted, waiting requests are admitted in order
              while budget, max_num_seqs and memory allow: a prefix hit counts as computed,
              the rest is prefilled (a chunk when the budget is short; with chunked prefill
              off, a prompt that does not fit the budget waits). Admission needs the free
              blocks for all num_tokens plus the watermark, waived while nothing runs.
  update()    every request whose KV caught up with num_tokens samples one token (the step
              that completes a prefill samples the first); one that reached max_tokens
              finishes and frees its blocks: its last token never gets a KV slot.

A running request's num_tokens and num_computed_tokens live beside it in the running list
(Pool.run_*, by running index), so that the running pass and update read them in order
rather than by request id; `publish` writes them back to Requests, where everything else
reads them.

kvviz's own additions: a request whose whole life cannot fit the empty cache is rejected at
the head of the queue (vLLM would wait for it forever); workloads are cut to max_seq_len
beforehand, so vLLM's max_model_len never binds. The step's plan stays readable after it:
sched_ids / sched_starts / sched_counts (scheduled tokens per request, vLLM's
num_scheduled_tokens), preempted, finished.
"""
from __future__ import annotations

from numba import njit

from kvviz.engine.rule import kv
from kvviz.engine.rule.events import emit
from kvviz.engine.rule.shares import account
from kvviz.engine.rule.state import (
    ARRIVED,
    DONE,
    FAIL_CAPACITY,
    FIRST_ADMITTED,
    HIT_TOKENS,
    K_ADMIT_FAILED,
    K_ADMITTED,
    K_FINISHED,
    K_PARTIAL,
    K_PREEMPTED,
    K_REJECTED,
    LAST_FAIL_REASON,
    LAST_FAIL_SEQ,
    NEXT_NEW,
    NUM_FINISHED,
    NUM_FRONT,
    NUM_PREEMPTED,
    NUM_RUNNING,
    NUM_SCHED,
    NUM_USED,
    PREEMPTIONS,
    PRESSURE,
    QUERY_TOKENS,
    R_NONE,
    R_POLICY,
    REFUSED_FREE,
    REFUSED_LARGEST,
    REFUSED_NEED,
    REFUSED_REASON,
    REFUSED_SEQ,
    REJECTED,
    STEP,
    TOKENS_GENERATED,
    TOO_BIG_LEFT,
)


@njit(cache=True)
def num_waiting(p):
    return p.c[NUM_FRONT] + p.c[ARRIVED] - p.c[NEXT_NEW]


@njit(cache=True)
def _head(p):
    c = p.c
    return p.front[c[NUM_FRONT] - 1] if c[NUM_FRONT] else c[NEXT_NEW]


@njit(cache=True)
def _pop_head(p):
    c = p.c
    if c[NUM_FRONT]:
        c[NUM_FRONT] -= 1
    else:
        c[NEXT_NEW] += 1


@njit(cache=True)
def _schedule_one(p, r, start, count):
    k = p.c[NUM_SCHED]
    p.sched_ids[k] = r
    p.sched_starts[k] = start
    p.sched_counts[k] = count
    p.c[NUM_SCHED] = k + 1


@njit(cache=True)
def publish(p, req):
    """The running requests' num_tokens and num_computed_tokens into Requests (each entry
    point's last act: Python reads them there)."""
    for i in range(p.c[NUM_RUNNING]):
        r = p.running[i]
        req.num_tokens[r] = p.run_num_tokens[i]
        req.num_computed_tokens[r] = p.run_num_computed_tokens[i]


@njit(cache=True)
def _start_running(p, req, r, num_computed):
    """Waiting request r joins the end of the running list, `num_computed` tokens computed."""
    i = p.c[NUM_RUNNING]
    p.running[i] = r
    p.run_num_tokens[i] = req.num_tokens[r]
    p.run_num_computed_tokens[i] = num_computed
    p.run_final_tokens[i] = req.final_tokens[r]
    p.run_row[i] = req.row[r]
    p.c[NUM_RUNNING] = i + 1


@njit(cache=True)
def _preempt(p, cfg, req, time_s):
    """vLLM's _preempt_request on the last running request: blocks freed, computed reset,
    back to the front of the waiting queue. Returns it."""
    c = p.c
    c[NUM_RUNNING] -= 1
    victim = p.running[c[NUM_RUNNING]]
    req.num_tokens[victim] = p.run_num_tokens[c[NUM_RUNNING]]
    kv.free(p, cfg, req, victim)
    req.num_computed_tokens[victim] = 0
    p.front[c[NUM_FRONT]] = victim
    c[NUM_FRONT] += 1
    p.preempted[c[NUM_PREEMPTED]] = victim
    c[NUM_PREEMPTED] += 1
    c[PREEMPTIONS] += 1
    emit(p, time_s, c[STEP], K_PREEMPTED, victim, R_NONE, 0, 0, 0, 1)
    return victim


@njit(cache=True, inline="always")
def _plan(p, k, r, start, n):
    """Running request r (running index k) computes tokens [start, start + n), k-th in the
    step's plan."""
    p.sched_ids[k] = r
    p.sched_starts[k] = start
    p.sched_counts[k] = n
    p.run_num_computed_tokens[k] = start + n


@njit(cache=True)
def _schedule_in_place(p, cfg, req, i, num_running, budget):
    """_decide's pass over the running requests from i on, while each one's tokens fit the
    blocks (cells) it holds (kv.grow_within): each is scheduled, in order. A loop that
    calls nothing, so the compiler keeps its state in registers (a counter in p.c would
    be re-read after every store into an array); one copy of it for lanes that cache
    blocks, one for the others. Returns where it stopped, the budget left, the slots
    written (for c[NUM_USED]) and whether a request was left short of its known tokens (a
    prefill chunk)."""
    if cfg.paged and cfg.prefix_caching:
        return _in_place(p, cfg, req, i, num_running, budget, True)
    return _in_place(p, cfg, req, i, num_running, budget, False)


@njit(cache=True, inline="always")
def _in_place(p, cfg, req, i, num_running, budget, caching):
    used = 0
    partial = False
    while i < num_running and budget > 0:
        r = p.running[i]
        start = p.run_num_computed_tokens[i]
        total = p.run_num_tokens[i]
        n = min(total - start, budget)
        extra = kv.grow_within(p, cfg, req, r, p.run_row[i], start + n, caching)
        if extra < 0:
            break
        used += extra
        _plan(p, i, r, start, n)
        partial |= start + n < total
        budget -= n
        i += 1
    return i, budget, used, partial


@njit(cache=True)
def _allocate(p, cfg, req, r, num_tokens, time_s):
    """Slots up to `num_tokens` for running request r, preempting the lowest priority (the
    last running request) while they cannot be allocated. False if r itself was preempted."""
    while not kv.grow(p, cfg, req, r, num_tokens):
        if _preempt(p, cfg, req, time_s) == r:
            return False
    return True


@njit(cache=True)
def log_partial(p, req, time_s):
    """A `partial` event (docs/FORMAT.md) for each running request the plan leaves short of
    its known tokens: a prefill chunk with more prompt to come, or a request the token
    budget left without tokens. It samples nothing this step; `need` carries the slots it has
    written at the step's end, so a reader re-derives every length and tokens_generated."""
    c = p.c
    for i in range(c[NUM_RUNNING]):
        have = p.run_num_computed_tokens[i]
        if have < p.run_num_tokens[i]:
            emit(p, time_s, c[STEP], K_PARTIAL, p.running[i], R_NONE, have, 0, 0, 1)


@njit(cache=True)
def schedule(p, cfg, req, time_s):
    """One schedule(): the plan into sched_*, the events of its decisions into the log
    (partial steps last). Returns whether the step was under memory pressure (a
    preemption, or the head refused for memory)."""
    pressure, partial = _decide(p, cfg, req, time_s)
    if partial:
        log_partial(p, req, time_s)
    return pressure


@njit(cache=True)
def _decide(p, cfg, req, time_s):
    c = p.c
    budget = cfg.max_num_batched_tokens
    c[NUM_PREEMPTED] = 0
    c[REFUSED_SEQ] = -1
    # First, schedule the RUNNING requests: in their common case (their tokens fit the
    # blocks they hold) a loop of its own, _schedule_in_place; the others here. The plan's
    # index is the running index: each request is scheduled, or the pass ends.
    partial = False  # a request left short of its known tokens: log_partial has work
    num_running = c[NUM_RUNNING]
    i = 0
    while True:
        i, budget, used, short = _schedule_in_place(p, cfg, req, i, num_running, budget)
        c[NUM_USED] += used
        partial |= short
        if i == num_running or budget <= 0:
            break
        r = p.running[i]  # it needs blocks, or fills one that prefix caching registers
        start = p.run_num_computed_tokens[i]
        total = p.run_num_tokens[i]
        n = min(total - start, budget)
        scheduled = _allocate(p, cfg, req, r, start + n, time_s)
        num_running = c[NUM_RUNNING]
        if not scheduled:
            break
        _plan(p, i, r, start, n)
        partial |= start + n < total
        budget -= n
        i += 1
    c[NUM_SCHED] = i
    c[FIRST_ADMITTED] = i
    partial |= i < num_running  # the budget ran out before them
    if c[NUM_PREEMPTED]:
        return True, partial
    # Next, schedule the WAITING requests (only if no preemptions happened).
    first = c[NUM_SCHED]
    refused, reason, need, free, largest = -1, R_NONE, 0, 0, 0
    while budget > 0 and num_waiting(p):
        r = _head(p)
        if req.too_big[r]:
            _pop_head(p)
            whole = req.prompt[r] + req.max_tokens[r] - 1
            if not cfg.paged:
                whole = max(whole, req.reserve[r])
            why, need_w, free_w, largest_w = kv.check_whole(p, cfg, whole)
            c[REJECTED] += 1
            c[TOO_BIG_LEFT] -= 1
            emit(p, time_s, c[STEP], K_REJECTED, r, why, need_w, free_w, largest_w, 1)
            continue
        total = req.num_tokens[r]
        num_hits = kv.pool.find_longest_cache_hit(p, cfg, req, r, p.hits) if cfg.paged else 0
        hit = num_hits * cfg.block_size
        n = total - hit
        ok, reason, need, free, largest = kv.check_admission(p, cfg, req, r, num_hits,
                                                             c[NUM_RUNNING])
        if c[NUM_RUNNING] >= cfg.max_num_seqs or (not cfg.enable_chunked_prefill
                                                  and n > budget):
            refused = r
            if ok:  # a limit binds while memory would serve
                reason = R_POLICY
            break
        if not ok:
            refused = r
            break
        n = min(n, budget)
        kv.admit(p, cfg, req, r, num_hits, hit + n)
        _pop_head(p)
        _start_running(p, req, r, hit + n)
        if cfg.prefix_caching:  # vLLM counts queries only where it looks the cache up
            c[QUERY_TOKENS] += total
            c[HIT_TOKENS] += hit
        p.admitted_free[c[NUM_SCHED] - first] = kv.free_slots(p, cfg)
        _schedule_one(p, r, hit, n)
        partial |= hit + n < total
        budget -= n
    if c[NUM_SCHED] > first:
        c[LAST_FAIL_SEQ] = -1
        for k in range(first, c[NUM_SCHED]):
            r = p.sched_ids[k]
            emit(p, time_s, c[STEP], K_ADMITTED, r, R_NONE, req.num_tokens[r],
                 p.admitted_free[k - first], 0, 1)
    if refused < 0:
        return False, partial
    c[REFUSED_SEQ], c[REFUSED_REASON] = refused, reason
    c[REFUSED_NEED], c[REFUSED_FREE], c[REFUSED_LARGEST] = need, free, largest
    if refused != c[LAST_FAIL_SEQ] or reason != c[LAST_FAIL_REASON]:
        # one event per (request, reason) while it stays blocked
        c[LAST_FAIL_SEQ] = refused
        c[LAST_FAIL_REASON] = reason
        c[FAIL_CAPACITY + reason - 1] += 1
        emit(p, time_s, c[STEP], K_ADMIT_FAILED, refused, reason, need, free, largest, 1)
    return reason != R_POLICY, partial


@njit(cache=True)
def update(p, cfg, req, time_s):
    """vLLM's update_from_output: every scheduled request whose KV caught up samples one
    token; one that reached max_tokens finishes and frees its blocks (in step order).

    The plan's index is the running index (sched_ids[k] == running[k]: the running
    requests are scheduled in order, and admissions, appended to both, follow only when
    every running request was), so the k-th planned request's fields are run_*[k]."""
    c = p.c
    finished = 0
    sampled = 0
    for k in range(c[NUM_SCHED]):
        total = p.run_num_tokens[k]
        if p.sched_starts[k] + p.sched_counts[k] != total:  # its num_computed_tokens, from
            continue  # the plan's columns: a prefill chunk, nothing sampled
        p.run_num_tokens[k] = total + 1
        sampled += 1
        if total + 1 >= p.run_final_tokens[k]:  # its max_tokens sampled
            r = p.sched_ids[k]
            req.num_tokens[r] = total + 1  # it stops running
            req.num_computed_tokens[r] = p.run_num_computed_tokens[k]
            p.finished[finished] = r
            p.finished_at[finished] = k
            finished += 1
    c[TOKENS_GENERATED] += sampled
    c[NUM_FINISHED] = finished
    if not finished:
        return
    for k in range(finished):
        r = p.finished[k]
        kv.free(p, cfg, req, r)
        c[DONE] += 1
        emit(p, time_s, c[STEP], K_FINISHED, r, R_NONE, 0, 0, 0, 1)
    # the running list (and its fields) without them, in order: each stretch between two
    # of them moves down
    keep = p.finished_at[0]
    for k in range(finished):
        lo = p.finished_at[k] + 1
        hi = p.finished_at[k + 1] if k + 1 < finished else c[NUM_RUNNING]
        _move_down(p.running, keep, lo, hi)
        _move_down(p.run_num_tokens, keep, lo, hi)
        _move_down(p.run_num_computed_tokens, keep, lo, hi)
        _move_down(p.run_final_tokens, keep, lo, hi)
        _move_down(p.run_row, keep, lo, hi)
        keep += hi - lo
    c[NUM_RUNNING] = keep


@njit(cache=True, inline="always")
def _move_down(a, to, lo, hi):
    """a[lo:hi] to a[to:to + hi - lo], to <= lo (in order, so overlapping is fine)."""
    for x in range(hi - lo):
        a[to + x] = a[lo + x]


@njit(cache=True)
def step(p, cfg, req, time_s):
    """One engine step: schedule, update, account."""
    p.c[STEP] += 1
    pressure = schedule(p, cfg, req, time_s)
    p.c[PRESSURE] = pressure
    update(p, cfg, req, time_s)
    account(p, cfg, req, pressure, 1, time_s)
