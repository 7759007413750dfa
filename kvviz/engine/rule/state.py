"""The compiled rule's state: struct-of-arrays records, built once per lane in Python.

Python holds the state as three namedtuples: `Config` (the lane's fixed knobs, scalars),
`Requests` (one entry per request of the workload) and `Pool` (the KV memory and the
scheduler's queues). A scalar that changes (a counter, a queue length) lives in the int64
array `Pool.c` at an index named below; every other field is an array the compiled code
writes in place. Integer widths: token counts, steps and counters are int64 (numba wraps
silently), block ids int32.

Inside the compiled rule, `Pool` and `Requests` travel as records over the same arrays
(records.py: why, and how), read by the same field names; each entry point Python calls
(advance.py, direct.py) makes them once.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

# Pool.c: the lane's scalars (int64), by name
(STEP, DONE, REJECTED, PREEMPTIONS, TOKENS_GENERATED, QUERY_TOKENS, HIT_TOKENS,
 FAIL_CAPACITY, FAIL_FRAGMENTATION, FAIL_POLICY, LAST_FAIL_SEQ, LAST_FAIL_REASON,
 EVICTIONS, EVICTIONS_SEEN, ARRIVED, NEXT_NEW, NUM_RUNNING, NUM_FRONT, NUM_USED, NUM_HELD,
 NUM_FREE_STACK, LRU_HEAD, LRU_TAIL, LRU_COUNT, NUM_FREE_ROWS, NUM_EVENTS, NUM_SCHED,
 NUM_PREEMPTED, NUM_HOLES, HELD_CELLS, TOO_BIG_LEFT, PRESSURE, NUM_FINISHED,
 FIRST_ADMITTED, REFUSED_SEQ, REFUSED_REASON, REFUSED_NEED, REFUSED_FREE, REFUSED_LARGEST,
 KV_LOG_ON, NUM_KV_LOG, HELD_LOG_ON, NUM_HELD_LOG, INTERNAL, NUM_COUNTERS) = range(45)
# INTERNAL: the running requests' internal fragmentation, Σ max(0, held slots - kv_final)
# (kept as rows grow and go: shares.held_changed). The last step's plan:
# sched_*[:FIRST_ADMITTED] ran before, the rest were admitted; the head refused
# (REFUSED_SEQ, -1: none) with its answer

# reasons (eventlog.REASONS' codes) and event kinds (eventlog.KINDS' codes)
R_NONE, R_CAPACITY, R_FRAGMENTATION, R_POLICY = 0, 1, 2, 3
(K_ADMITTED, K_ADMIT_FAILED, K_PREEMPTED, K_FINISHED, K_EVICTED, K_REJECTED,
 K_PARTIAL) = range(7)  # kvviz/engine/eventlog.py's KINDS
FIRST_FIT, BEST_FIT, BUDDY = 0, 1, 2
PLACEMENT_CODE = {"first-fit": FIRST_FIT, "best-fit": BEST_FIT, "buddy": BUDDY}
NO_BLOCK = -1


class Config(NamedTuple):
    n: int  # requests
    paged: bool
    prefix_caching: bool
    placement: int  # contiguous: FIRST_FIT | BEST_FIT | BUDDY
    block_size: int  # paged: tokens per block; contiguous: tokens per cell
    num_blocks: int  # paged: blocks; contiguous: cells
    capacity: int  # token slots
    max_num_seqs: int
    max_num_batched_tokens: int
    enable_chunked_prefill: bool
    watermark_blocks: int  # vLLM: int(watermark * num_blocks incl. the null block)
    step_ms: float
    chain_block: int  # tokens per chain id (prefix keys)


class Requests(NamedTuple):
    arrival_step: np.ndarray  # int64: the first step whose clock reaches the arrival
    prompt: np.ndarray  # int64
    max_tokens: np.ndarray  # int64: output length (vLLM's sampling_params.max_tokens)
    kv_final: np.ndarray  # int64: slots of a finished request (its last token has none)
    too_big: np.ndarray  # bool: its whole life cannot fit the empty cache (rejected)
    reserve: np.ndarray  # int64: contiguous reservation (0 for paged lanes)
    num_tokens: np.ndarray  # int64: prompt + output tokens sampled so far
    num_computed_tokens: np.ndarray  # int64: tokens whose KV is written
    final_tokens: np.ndarray  # int64: prompt + max_tokens, its num_tokens once finished
    row: np.ndarray  # int64: the running request's row in the block tables (-1: none)
    chain_ptr: np.ndarray  # int64 [n + 1]: the prompt's hash chain, chain_ids[ptr[r]:...]
    chain_ids: np.ndarray  # int64
    chain_cover: np.ndarray  # int64: prompt tokens its chain names


class Pool(NamedTuple):
    c: np.ndarray  # int64 [NUM_COUNTERS]: the scalars above
    shares: np.ndarray  # int64 [2, 6]: (every step, pressure steps) x (steps, used,
    #                     reserved, internal, free, tail) in slot-steps
    efi: np.ndarray  # float64 [2]: the external fragmentation index summed per step
    running: np.ndarray  # int64: running requests in order ([:c[NUM_RUNNING]])
    # the running requests' hot fields, by running index, beside `running` (moved with it):
    # while a request runs these are its num_tokens and num_computed_tokens, and Requests'
    # own are written back when it stops running and when a compiled call returns
    # (scheduler.publish); its final_tokens and row, copied at admission
    run_num_tokens: np.ndarray  # int64
    run_num_computed_tokens: np.ndarray  # int64
    run_final_tokens: np.ndarray  # int64
    run_row: np.ndarray  # int64
    front: np.ndarray  # int64: preempted requests, a stack (the waiting queue's front)
    sched_ids: np.ndarray  # int64: this step's scheduled requests in vLLM's order
    sched_starts: np.ndarray  # int64: tokens each had computed before the step
    sched_counts: np.ndarray  # int64: tokens each computes in the step
    preempted: np.ndarray  # int64: this step's preempted requests, in order
    finished: np.ndarray  # int64: this step's finished requests, in order
    finished_at: np.ndarray  # int64: their running indices (update's)
    # paged: vLLM's BlockPool (vllm/v1/core/block_pool.py) and per-row block tables
    ref_cnt: np.ndarray  # int32 per block
    block_hash: np.ndarray  # uint64 per block (0: none)
    dup_next: np.ndarray  # int32 per block: next block cached under the same hash
    block_end: np.ndarray  # int64 per block: the token position its hash reaches
    block_parent: np.ndarray  # uint64 per block: the hash of the block before it (0: none)
    content: np.ndarray  # int64 per block: slots a cached free block holds
    free_stack: np.ndarray  # int32: plain free blocks, the next taken last
    lru_prev: np.ndarray  # int32 per block: the cached free blocks, a doubly linked list
    lru_next: np.ndarray  # int32 per block
    in_lru: np.ndarray  # bool per block
    hash_keys: np.ndarray  # uint64: open addressing table, hash -> first block (0: empty)
    hash_blocks: np.ndarray  # int32
    block_table: np.ndarray  # int32 [rows, width]
    row_hashes: np.ndarray  # uint64 [rows, width]: block hashes of the row's blocks
    row_num_blocks: np.ndarray  # int64 per row
    row_len: np.ndarray  # int64 per row: slots written
    row_num_cached: np.ndarray  # int64 per row: leading blocks registered in the cache
    row_start: np.ndarray  # int64 per row: contiguous range's first cell
    row_seq: np.ndarray  # int64 per row: the request it holds (-1: none)
    free_rows: np.ndarray  # int64: a stack of unused rows
    scratch: np.ndarray  # int32: blocks being freed
    hits: np.ndarray  # int64: the head's prefix hits (blocks)
    admitted_free: np.ndarray  # int64: free slots right after each admission of the step
    # contiguous: free holes by address (first/best fit), or buddy lists per order
    hole_start: np.ndarray  # int64
    hole_size: np.ndarray  # int64
    buddy_list: np.ndarray  # int64: per order, its free blocks' starts, ascending
    buddy_off: np.ndarray  # int64 per order: where its list begins in buddy_list
    buddy_count: np.ndarray  # int64 per order
    buddy_region: np.ndarray  # int64 [regions, 2]: (base, order), ascending bases
    # the event log, as columns ([:c[NUM_EVENTS]]); Python drains it (EventLog's codes)
    ev_time: np.ndarray  # float64: the step's clock
    ev_step: np.ndarray  # int64
    ev_kind: np.ndarray  # int8
    ev_seq: np.ndarray  # int64
    ev_reason: np.ndarray  # int8
    ev_need: np.ndarray  # int64
    ev_free: np.ndarray  # int64
    ev_largest: np.ndarray  # int64
    ev_count: np.ndarray  # int64
    # vLLM's KV cache events (BlockStored / BlockRemoved), while c[KV_LOG_ON]: kind (1 stored,
    # 2 removed), the block's hash and end, its parent's hash (0: none)
    kv_kind: np.ndarray  # int8
    kv_hash: np.ndarray  # uint64
    kv_end: np.ndarray  # int64
    kv_parent: np.ndarray  # uint64
    # while c[HELD_LOG_ON], advance logs after each step (an idle span: once, at its last
    # step) the step and the blocks (cells) held then: the twin's occupancy curve
    held_step: np.ndarray  # int64
    held_blocks: np.ndarray  # int64
