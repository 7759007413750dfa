"""A long, clean recording written through the store's own writer (RunWriter.add_sample,
add_events): one paged lane, a sample every STEPS_PER_SAMPLE steps and, each step, ADMITS
sequences admitted and finished in that same step (event_chunks), one `evicted` and one POLICY
`admit_failed` (rows of `events`): 10 events a step, 1000 a sample. Its samples' counters
follow from those events, so the verifier finds it clean and has to replay every event to say
so. tests/fuzz/test_events_streamed.py and benchmarks/long_recording.py build it.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

LANE, BLOCK, BLOCKS = "paged:16", 16, 64
STEPS_PER_SAMPLE, ADMITS = 100, 4  # per step: ADMITS admitted + finished, 1 evicted, 1 failed


def _step_events(first_step: int, steps: int, first_seq: int):
    """EventColumns of `steps` steps from `first_step` (engine order within each step)."""
    from kvviz.engine.eventlog import DTYPES, KIND_CODE, REASON_CODE, EventColumns

    per = 2 * ADMITS + 2
    step = np.repeat(np.arange(first_step, first_step + steps, dtype=np.int64), per)
    slot = np.tile(np.arange(per), steps)
    kind = np.select([slot < ADMITS, slot < 2 * ADMITS, slot == 2 * ADMITS],
                     [KIND_CODE["admitted"], KIND_CODE["finished"], KIND_CODE["evicted"]],
                     KIND_CODE["admit_failed"]).astype(np.int8)
    seq = first_seq + (step - first_step) * ADMITS + slot % ADMITS
    seq = np.where(slot < 2 * ADMITS, seq, np.where(slot == 2 * ADMITS, -1, seq + 1))
    cols = {"time_s": step * 0.01, "step": step, "lane": np.zeros(len(step), np.int8),
            "kind": kind, "seq_id": seq,
            "reason": np.where(slot == per - 1, REASON_CODE["POLICY"], 0).astype(np.int8),
            "need_tokens": np.where(slot < ADMITS, 8, 16),
            "free_tokens": np.full(len(step), BLOCK * BLOCKS),
            "largest_hole_tokens": np.where(slot == per - 1, BLOCK * BLOCKS, 0),
            "count": np.ones(len(step))}
    return EventColumns({f: np.asarray(cols[f], d) for f, d in DTYPES.items()}, [LANE])


def events_recording(path: Path, events: int) -> Path:
    """A clean recording of about `events` engine events (10 a step, 1000 a sample; at least
    one sample)."""
    from kvviz.core.config import LaneSpec
    from kvviz.core.metrics import compute
    from kvviz.engine.kvpool import KVPool
    from kvviz.store.writer import RunWriter

    bm = KVPool(LaneSpec("paged", BLOCK), BLOCKS * BLOCK).snapshot()
    metrics = compute(bm).as_dict()
    meta = {"mode": "sim", "lanes": [{"name": LANE, "block_size": BLOCK, "num_blocks": BLOCKS,
                                      "capacity_tokens": BLOCK * BLOCKS}]}
    w = RunWriter(path, meta, overwrite=True)
    samples = max(1, events // (10 * STEPS_PER_SAMPLE))
    for k in range(samples):
        first, last = k * STEPS_PER_SAMPLE + 1, (k + 1) * STEPS_PER_SAMPLE
        w.add_sample(last * 0.01, last, LANE, {
            **metrics, "running": 0, "preemptions": 0, "admit_failures_capacity": 0,
            "admit_failures_fragmentation": 0, "admit_failures_policy": last,
            "tokens_generated": ADMITS * last, "tokens_per_s": ADMITS * 100.0}, bm)
        w.add_events(_step_events(first, STEPS_PER_SAMPLE, (first - 1) * ADMITS))
        if k % 100 == 99:
            w.commit()
    w.close("finished")
    return path
