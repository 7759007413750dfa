"""The per-step log the twin's self-check reads (kvviz/twin/selfcheck.py's StepRecord), made
inside one compiled run instead of reading the pool from Python after every step.

`advance_logged` runs a lane as `advance` does (it calls advance's own loop, one busy step
at a time, an idle span jumped at once before the step that ends it) and after each step
writes what the step's plan holds (scheduler.py: sched_ids, FIRST_ADMITTED, preempted) and
the running set around it. A step is logged when a request ran or was preempted in it; per
logged step four lists, one after another in `ids`:

  admitted   sched_ids[FIRST_ADMITTED:NUM_SCHED] (new or resumed)
  preempted  preempted[:NUM_PREEMPTED]
  finished   running before the step, not preempted, or admitted, and not running after it
  scheduled  sched_ids[:NUM_SCHED]

and, at the steps asked for while fewer than `budget` block ids are kept, each running
request's block table after the step (vLLM's numbering: kvviz block b is vLLM's b + 1).
The log's arrays are Python's (`empty`, `grown`); a call answers LOG_FULL when the next step
might not fit them, FULL when the lane's own logs need room (Lane.grow_events).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from kvviz.engine.rule.advance import DONE_OR_UNTIL, FULL, _advance
from kvviz.engine.rule.records import records
from kvviz.engine.rule.scheduler import num_waiting, publish
from kvviz.engine.rule.state import (
    ARRIVED,
    DONE,
    FIRST_ADMITTED,
    NUM_PREEMPTED,
    NUM_RUNNING,
    NUM_SCHED,
    REJECTED,
    STEP,
)

LOG_FULL = 3  # advance.FULL (1) and DONE_OR_UNTIL (0) keep their meaning
LISTS = ("admitted", "preempted", "finished", "scheduled")  # per step, in this order
# StepLog.lc: entries used in each array, and the block ids kept so far
L_STEPS, L_IDS, L_TABLES, L_TAB_SEQS, L_TAB_BLOCKS, L_NUM = range(6)


class StepLog(NamedTuple):
    lc: np.ndarray  # int64 [L_NUM]
    step: np.ndarray  # int64 per logged step: its engine step
    counts: np.ndarray  # int64 [steps, 4]: the sizes of its LISTS
    ids: np.ndarray  # int64: each logged step's LISTS, one after another
    tab_step: np.ndarray  # int64 per step whose tables are kept
    tab_nseq: np.ndarray  # int64 per step whose tables are kept: requests running after it
    tab_seq: np.ndarray  # int64 per (kept step, running request), in the running order
    tab_len: np.ndarray  # int64: that request's blocks
    tab_blocks: np.ndarray  # int64: its block ids, vLLM's numbering


def empty(steps: int = 1024, ids: int = 4096, tables: int = 16, seqs: int = 256,
          blocks: int = 4096) -> StepLog:
    return StepLog(np.zeros(L_NUM, np.int64), np.zeros(steps, np.int64),
                   np.zeros((steps, 4), np.int64), np.zeros(ids, np.int64),
                   np.zeros(tables, np.int64), np.zeros(tables, np.int64),
                   np.zeros(seqs, np.int64), np.zeros(seqs, np.int64),
                   np.zeros(blocks, np.int64))


def grown(log: StepLog, cfg, width: int) -> StepLog:
    """A copy of `log` with room for at least one more step of a lane with `cfg` whose
    block tables are `width` wide (what `_room` asks)."""
    lc = log.lc
    m = _most(cfg)
    need = {"step": (lc[L_STEPS], 1), "counts": (lc[L_STEPS], 1), "ids": (lc[L_IDS], 4 * m),
            "tab_step": (lc[L_TABLES], 1), "tab_nseq": (lc[L_TABLES], 1),
            "tab_seq": (lc[L_TAB_SEQS], m), "tab_len": (lc[L_TAB_SEQS], m),
            "tab_blocks": (lc[L_TAB_BLOCKS], m * width)}
    fresh = {}
    for name, (used, more) in need.items():
        a = getattr(log, name)
        used, size = int(used), a.shape[0]
        if size - used < more:
            b = np.zeros((max(2 * size, used + int(more)),) + a.shape[1:], a.dtype)
            b[:used] = a[:used]
            fresh[name] = b
    return log._replace(**fresh)


def _most(cfg) -> int:
    """Most requests one step can run (so admit, schedule, finish)."""
    return min(cfg.max_num_seqs, cfg.n)


@njit(cache=True)
def _room(log, p, cfg, with_tables):
    lc, m = log.lc, min(cfg.max_num_seqs, cfg.n)
    if log.step.size == lc[L_STEPS] or log.ids.size - lc[L_IDS] < 3 * m + p.c[NUM_RUNNING]:
        return False
    if not with_tables:
        return True
    return (log.tab_step.size > lc[L_TABLES] and log.tab_seq.size - lc[L_TAB_SEQS] >= m
            and log.tab_blocks.size - lc[L_TAB_BLOCKS] >= m * p.block_table.shape[1])


@njit(cache=True)
def advance_logged(p, cfg, req, log, table_steps, every_step, budget):
    """Run the lane to the end, logging each busy step (the module's docstring); tables
    after the steps in `table_steps` (sorted), or after every logged step when
    `every_step`, while fewer than `budget` block ids are kept. Returns LOG_FULL or FULL
    when a log needs room first (nothing of the next step done), else DONE_OR_UNTIL."""
    pool, conf, reqs = records(p, cfg, req)
    answer = _advance_logged(pool, conf, reqs, log, table_steps, every_step, budget)
    publish(pool, reqs)
    return answer


@njit(cache=True)
def _advance_logged(pool, conf, reqs, log, table_steps, every_step, budget):
    c = pool.c
    before = np.zeros(pool.running.size, np.int64)
    mark = np.zeros(conf.n, np.int8)
    while c[DONE] + c[REJECTED] < conf.n:
        until = c[STEP] + 1
        if c[NUM_RUNNING] == 0 and num_waiting(pool) == 0 and c[ARRIVED] < conf.n:
            until = reqs.arrival_step[c[ARRIVED]]  # the idle span, then its arrival's step
        want = every_step or _member(table_steps, until)
        if not _room(log, pool, conf, want):
            return LOG_FULL
        k = c[NUM_RUNNING]
        before[:k] = pool.running[:k]
        if _advance(pool, conf, reqs, until) == FULL:
            return FULL
        if _log_lists(pool, log, before, k, mark) and want and log.lc[L_TAB_BLOCKS] < budget:
            _log_tables(pool, reqs, log)
    return DONE_OR_UNTIL


@njit(cache=True)
def _member(sorted_steps, s):
    i = np.searchsorted(sorted_steps, s)
    return i < sorted_steps.size and sorted_steps[i] == s


@njit(cache=True)
def _log_lists(p, log, before, k, mark):
    """Log the step just made when a request ran or was preempted in it (True), from the
    running set `before[:k]`. `mark` (per request, zero between calls): bit 0 ran in the
    step, bit 1 runs after it."""
    c, lc = p.c, log.lc
    first, ns, npre, nrun = c[FIRST_ADMITTED], c[NUM_SCHED], c[NUM_PREEMPTED], c[NUM_RUNNING]
    for i in range(k):
        mark[before[i]] = 1
    for i in range(npre):
        mark[p.preempted[i]] = 0
    for i in range(first, ns):
        mark[p.sched_ids[i]] = 1
    busy = npre > 0
    for i in range(k):
        busy = busy or mark[before[i]] == 1
    busy = busy or ns > first
    if busy:
        for i in range(nrun):
            mark[p.running[i]] |= 2
        s, at = lc[L_STEPS], lc[L_IDS]
        log.step[s] = c[STEP]
        for i in range(first, ns):
            log.ids[at] = p.sched_ids[i]
            at += 1
        for i in range(npre):
            log.ids[at] = p.preempted[i]
            at += 1
        fin = at
        for i in range(k + ns - first):  # before, then the admitted
            r = before[i] if i < k else p.sched_ids[first + i - k]
            if mark[r] == 1:  # ran in the step, not running after it
                log.ids[at] = r
                at += 1
                mark[r] = 0
        for i in range(ns):
            log.ids[at] = p.sched_ids[i]
            at += 1
        log.counts[s, 0], log.counts[s, 1] = ns - first, npre
        log.counts[s, 2], log.counts[s, 3] = at - ns - fin, ns
        lc[L_STEPS], lc[L_IDS] = s + 1, at
    for i in range(k):
        mark[before[i]] = 0
    for i in range(ns):
        mark[p.sched_ids[i]] = 0
    for i in range(nrun):
        mark[p.running[i]] = 0
    return busy


@njit(cache=True)
def _log_tables(p, req, log):
    """Each running request's block table after the step (vLLM's numbering)."""
    c, lc = p.c, log.lc
    t, q, b = lc[L_TABLES], lc[L_TAB_SEQS], lc[L_TAB_BLOCKS]
    log.tab_step[t] = c[STEP]
    log.tab_nseq[t] = c[NUM_RUNNING]
    for i in range(c[NUM_RUNNING]):
        r = p.running[i]
        row = req.row[r]
        nb = p.row_num_blocks[row]
        log.tab_seq[q], log.tab_len[q] = r, nb
        q += 1
        for j in range(nb):
            log.tab_blocks[b] = p.block_table[row, j] + 1
            b += 1
    lc[L_TABLES], lc[L_TAB_SEQS], lc[L_TAB_BLOCKS] = t + 1, q, b
