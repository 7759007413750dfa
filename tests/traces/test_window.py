"""--limit, --start-s, --duration-s and --time-scale; rows outside are counted."""
from __future__ import annotations

import pytest

from kvviz.traces import TraceOptions, read_trace_bytes
from tests.traces import samples as S

RAW = S.burstgpt([(t, "m", t + 1, 1) for t in range(10)])


def test_limit_keeps_the_first_n_requests():
    w, info = read_trace_bytes(RAW, "f", TraceOptions(limit=3))
    assert w.prompt.tolist() == [1, 2, 3] and info.rows_kept == 3


def test_start_and_duration_select_a_window_that_starts_at_zero():
    w, info = read_trace_bytes(RAW, "f", TraceOptions(start_s=2, duration_s=3))
    assert w.prompt.tolist() == [3, 4, 5]
    assert w.arrival_s.tolist() == [0.0, 1.0, 2.0]
    assert info.rows_kept + info.outside_rows == info.rows_read


def test_time_scale_replays_faster():
    w, _ = read_trace_bytes(RAW, "f", TraceOptions(time_scale=4.0, limit=3))
    assert w.arrival_s.tolist() == [0.0, 0.25, 0.5]


@pytest.mark.parametrize("kw", [dict(limit=0), dict(start_s=-1), dict(duration_s=0),
                                dict(time_scale=0), dict(fmt="parquet")])
def test_bad_options_are_refused(kw):
    with pytest.raises(ValueError):
        TraceOptions(**kw)
