"""EventBuffer (kvviz/engine/eventbuffer.py): logging through it and flushing leaves the log
exactly as direct EventLog calls would."""
from __future__ import annotations

import numpy as np
import pytest

from kvviz.engine.eventbuffer import ROWS, EventBuffer
from kvviz.engine.eventlog import KIND_CODE, REASON_CODE, EventLog


def _log(log) -> None:
    """A mix of calls as Lane logs them: arrays, lists, scalars, defaults."""
    code = 0
    log.add_many(0.02, 1, code, KIND_CODE["admitted"], np.array([3, 1], np.int64),
                 np.array([10, 20], np.int64), np.array([500, 480], np.int64))
    log.add_one(0.02, 1, code, KIND_CODE["admit_failed"], 4, REASON_CODE["CAPACITY"], 64, 12,
                8)
    log.add_many(0.04, 2, code, KIND_CODE["finished"], np.array([1], np.int64))
    log.add_many(0.04, 2, code, KIND_CODE["admitted"], [4], [64], [7])
    log.add_many(0.06, 3, code, KIND_CODE["preempted"], np.zeros(0, np.int64))
    log.add_one(0.08, 4, code, KIND_CODE["evicted"], -1, count=5)


def test_a_flushed_buffer_equals_direct_logging():
    direct, buffered = EventLog(), EventLog()
    for x in (direct, buffered):
        x.lane_code("lane")
    direct.add_one(0.0, 0, 0, KIND_CODE["admitted"], 9)  # something logged before
    buffered.add_one(0.0, 0, 0, KIND_CODE["admitted"], 9)
    _log(direct)
    buf = EventBuffer(buffered)
    _log(buf)
    assert len(buffered) == 1  # nothing reaches the log before the flush
    buf.flush()
    buf.flush()  # a second flush adds nothing
    assert buffered.events == direct.events
    cols, _ = buffered.since(0)
    want, _ = direct.since(0)
    for f, a in want.cols.items():
        assert cols.cols[f].dtype == a.dtype and np.array_equal(cols.cols[f], a), f


def test_add_many_refuses_columns_of_other_lengths():
    buf = EventBuffer(EventLog())
    with pytest.raises(ValueError, match="2 sequences, 1 needs"):
        buf.add_many(0.0, 1, 0, KIND_CODE["admitted"], np.array([1, 2]), np.array([5]))


def test_a_long_run_reaches_the_log_in_order_in_bounded_batches():
    direct, buffered = EventLog(), EventLog()
    for x in (direct, buffered):
        x.lane_code("lane")
    buf = EventBuffer(buffered)
    for i in range(3 * ROWS + 5):
        for x in (direct, buf):
            x.add_many(i * 0.02, i, 0, KIND_CODE["finished"], np.array([i], np.int64))
            x.add_one(i * 0.02, i, 0, KIND_CODE["admit_failed"], i + 1, REASON_CODE["POLICY"])
        assert len(buffered) + len(buf._rows) == len(direct)
        assert len(buf._rows) < ROWS
    buf.flush()
    assert buffered.events == direct.events
