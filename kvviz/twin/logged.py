"""The self-check's side of the baseline: one compiled run that logs every busy step
(kvviz/engine/rule/steplog.py), read back as the StepRecord (kvviz/twin/selfcheck.py).

What is kept is what the replay's record always held: per busy step the requests admitted,
preempted and finished (the running set carried over) and scheduled, and each running
request's block ids after the steps the node sampled (`RecordSpec.table_steps`; every busy
step when None) until TABLE_BUDGET ids are kept. tests/twin/stepped.py reads the same from
Python after each stepped step; a test holds the two equal.
"""
from __future__ import annotations

import time

import numpy as np

from kvviz.engine import Simulation
from kvviz.engine.rule import steplog
from kvviz.engine.rule.advance import FULL
from kvviz.engine.rule.build import check_arrivals
from kvviz.twin.blockids import Tables
from kvviz.twin.selfcheck import TABLE_BUDGET, RecordSpec, StepRecord


def run_logged(sim: Simulation, spec: RecordSpec) -> StepRecord:
    """Run `sim` (one lane, not yet run) to the end in compiled calls, with the occupancy
    log on (`Lane.held_log`), and return its StepRecord."""
    lane = sim.lanes[0]
    check_arrivals(sim.arrival_s, sim.engine.step_ms)  # as Simulation.run
    lane.log_held()
    every = spec.table_steps is None
    want = np.array(sorted(int(s) for s in spec.table_steps or ()), np.int64)
    log = steplog.empty()
    width = lane.pool.block_table.shape[1]
    t0 = time.perf_counter()
    while True:
        answer = steplog.advance_logged(lane.pool, lane.cfg, lane.req, log, want, every,
                                        TABLE_BUDGET)
        if answer == FULL:
            lane.grow_events()
        elif answer == steplog.LOG_FULL:
            log = steplog.grown(log, lane.cfg, width)
        else:
            break
    lane.wall_seconds += time.perf_counter() - t0
    sim.events.extend(lane.drain(0, tuple(sim.events.lanes)))
    sim.step_no = lane.step_no
    return record_of(log, spec)


def record_of(log: steplog.StepLog, spec: RecordSpec) -> StepRecord:
    """The StepRecord of a finished step log, the replay's requests named by
    `spec.seq_ids`."""
    lc = log.lc
    n = int(lc[steplog.L_STEPS])
    steps, counts = log.step[:n], log.counts[:n]
    ids = log.ids[:int(lc[steplog.L_IDS])]
    names = (lambda a: a) if spec.seq_ids is None else (
        lambda a: np.asarray(spec.seq_ids, np.int64)[a])
    which = np.repeat(np.tile(np.arange(4), n), counts.ravel())
    at = np.repeat(steps, counts.sum(axis=1))
    lists = {}
    for j, key in enumerate(steplog.LISTS):
        if key == "scheduled" and not spec.scheduled:
            continue
        a, b = at[which == j], names(ids[which == j]).astype(np.int64)
        order = np.lexsort((b, a))  # by (step, id), as StepRecord.from_steps
        lists[key] = (a[order], b[order])
    return StepRecord(_busy_runs(steps), lists, _tables(log, names))


def _busy_runs(steps: np.ndarray) -> np.ndarray:
    """Every logged step is busy and nothing runs on between two of them (a request running
    after a step runs or is preempted in the next): the runs of consecutive steps."""
    if not steps.size:
        return np.zeros((0, 2), np.int64)
    cut = np.flatnonzero(np.diff(steps) != 1)
    return np.stack([steps[np.r_[0, cut + 1]], steps[np.r_[cut, steps.size - 1]]],
                    axis=1).astype(np.int64)


def _tables(log: steplog.StepLog, names) -> dict[int, Tables]:
    lc = log.lc
    t = int(lc[steplog.L_TABLES])
    seqs = names(log.tab_seq[:int(lc[steplog.L_TAB_SEQS])]).tolist()
    lens = log.tab_len[:len(seqs)]
    blocks = np.split(log.tab_blocks[:int(lc[steplog.L_TAB_BLOCKS])], np.cumsum(lens)[:-1])
    out, q = {}, 0
    for step, k in zip(log.tab_step[:t].tolist(), log.tab_nseq[:t].tolist()):
        out[step] = Tables.of(dict(zip(seqs[q:q + k], blocks[q:q + k])))
        q += k
    return out
