"""The event log as columns the compiled rule appends to (kvviz/engine/eventlog.py's codes;
the lane code is added when Python drains it), the KV cache events and the occupancy log
(each while switched on). `advance` stops before a step could overflow any of them, and
Python grows them (`room`)."""
from __future__ import annotations

from numba import njit

from kvviz.engine.rule.state import (
    HELD_CELLS,
    HELD_LOG_ON,
    KV_LOG_ON,
    NUM_EVENTS,
    NUM_HELD,
    NUM_HELD_LOG,
    NUM_KV_LOG,
    NUM_RUNNING,
    STEP,
    TOO_BIG_LEFT,
)


@njit(cache=True)
def emit(p, time_s, step, kind, seq, reason, need, free, largest, count):
    i = p.c[NUM_EVENTS]
    p.ev_time[i] = time_s
    p.ev_step[i] = step
    p.ev_kind[i] = kind
    p.ev_seq[i] = seq
    p.ev_reason[i] = reason
    p.ev_need[i] = need
    p.ev_free[i] = free
    p.ev_largest[i] = largest
    p.ev_count[i] = count
    p.c[NUM_EVENTS] = i + 1


@njit(cache=True)
def step_bound(p, cfg):
    """Most events one step can log: preemptions, finishes (<= running) and admissions
    (<= max_num_seqs and the rows), partial steps (<= running + admissions), the rejections
    still possible, one refusal, one eviction count."""
    admissions = min(cfg.max_num_seqs, p.running.size)
    return 3 * p.c[NUM_RUNNING] + 2 * admissions + p.c[TOO_BIG_LEFT] + 2


@njit(cache=True)
def kv_bound(cfg):
    """Most KV cache events one step can log: blocks cached and blocks evicted, each at most
    the blocks a step's tokens fill or take."""
    return 2 * (cfg.max_num_batched_tokens // cfg.block_size + 2 * cfg.max_num_seqs + 2)


@njit(cache=True)
def log_held(p, cfg):
    """The occupancy log's entry for the step just done (advance's, while it is on)."""
    c = p.c
    if c[HELD_LOG_ON]:
        i = c[NUM_HELD_LOG]
        p.held_step[i] = c[STEP]
        p.held_blocks[i] = c[NUM_HELD] if cfg.paged else c[HELD_CELLS]
        c[NUM_HELD_LOG] = i + 1


@njit(cache=True)
def room(p, cfg):
    if p.c[KV_LOG_ON] and p.kv_kind.size - p.c[NUM_KV_LOG] < kv_bound(cfg):
        return False
    if p.c[HELD_LOG_ON] and p.held_step.size == p.c[NUM_HELD_LOG]:
        return False
    return p.ev_step.size - p.c[NUM_EVENTS] >= step_bound(p, cfg)
