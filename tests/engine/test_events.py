"""The columnar event log: order, cursors, trimming, decoding."""
from __future__ import annotations

import numpy as np
import pytest

from kvviz.engine.eventlog import KIND_CODE, REASON_CODE, Event, EventColumns, EventLog


def test_bulk_and_single_events_keep_their_order_and_values() -> None:
    log = EventLog(capacity=2)  # forces growth
    a, b = log.lane_code("paged:16"), log.lane_code("contiguous")
    assert (a, b, log.lane_code("paged:16")) == (0, 1, 0)
    log.add_many(0.5, 3, a, KIND_CODE["admitted"], np.array([7, 9, 4]), np.array([10, 20, 30]),
                 free_tokens=100)
    log.add_one(0.5, 3, b, KIND_CODE["admit_failed"], 7, REASON_CODE["FRAGMENTATION"], 64, 80, 32)
    log.add(Event(0.75, 4, "contiguous", "evicted", -1, count=5))
    log.add_many(1.0, 5, a, KIND_CODE["finished"], np.array([9]))
    assert len(log) == 6
    assert log.events == [
        Event(0.5, 3, "paged:16", "admitted", 7, None, 10, 100, 0, 1),
        Event(0.5, 3, "paged:16", "admitted", 9, None, 20, 100, 0, 1),
        Event(0.5, 3, "paged:16", "admitted", 4, None, 30, 100, 0, 1),
        Event(0.5, 3, "contiguous", "admit_failed", 7, "FRAGMENTATION", 64, 80, 32, 1),
        Event(0.75, 4, "contiguous", "evicted", -1, None, 0, 0, 0, 5),
        Event(1.0, 5, "paged:16", "finished", 9, None, 0, 0, 0, 1),
    ]


def test_since_and_trim_hand_out_each_event_once() -> None:
    log = EventLog(capacity=4)
    code = log.lane_code("x")
    seen: list[int] = []
    cursor = 0
    for step in range(50):
        ids = np.arange(step % 5) + 100 * step
        log.add_many(float(step), step, code, KIND_CODE["admitted"], ids)
        if step % 7 == 0:
            cols, cursor = log.since(cursor)
            seen += cols["seq_id"].tolist()
            log.trim(cursor)
    cols, cursor = log.since(cursor)
    seen += cols["seq_id"].tolist()
    want = [100 * s + i for s in range(50) for i in range(s % 5)]
    assert seen == want and cursor == len(log) == len(want)
    assert len(log.events) == len(cols)  # what the last trim left
    with pytest.raises(ValueError, match="trimmed"):
        log.since(0)


def test_columns_round_trip_and_shift() -> None:
    evs = [Event(0.1, 1, "b", "admitted", 3, None, 12, 50, 0),
           Event(0.2, 2, "a", "preempted", 3),
           Event(0.3, 2, "a", "evicted", -1, count=2)]
    cols = EventColumns.from_events(evs)
    assert cols.to_events() == evs
    moved = cols.shifted(time_s=10.0, seq_id=1000).to_events()
    assert [e.time_s for e in moved] == pytest.approx([10.1, 10.2, 10.3])
    assert [e.seq_id for e in moved] == [1003, 1003, -1]  # lane-wide -1 stays
    assert len(EventColumns.empty()) == 0 and EventColumns.empty().rows() == []


def test_columns_reject_missing_or_ragged_fields() -> None:
    cols = dict(EventColumns.from_events([Event(0.1, 1, "a", "finished", 1)]).cols)
    with pytest.raises(ValueError, match="equal lengths"):
        EventColumns({**cols, "step": np.zeros(2, np.int64)}, ["a"])
    del cols["count"]
    with pytest.raises(ValueError, match="count"):
        EventColumns(cols, ["a"])
