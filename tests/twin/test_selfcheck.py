"""The self-check: the replay's per-step record against the node's; the first difference named."""
from __future__ import annotations

import numpy as np
import pytest

from kvviz.core.errors import KvvizError
from kvviz.twin.runner import run_config
from kvviz.twin.selfcheck import StepRecord, compare
from kvviz.twin.settings import NodeSettings
from kvviz.twin.source import NO_REQUEST_LOG, is_recording, read_recording
from tests.twin.streams import stream


@pytest.fixture(scope="module")
def record() -> StepRecord:
    r = run_config(stream(80, 40.0), NodeSettings(16, 129, enable_prefix_caching=False),
                   record=True)
    assert r.record is not None and r.record.preemptions == r.summary["preemptions"] > 0
    return r.record


def _lists(rec: StepRecord):
    return ([rec.scheduled(k).tolist() for k in range(rec.steps)],
            [rec.preempted(k).tolist() for k in range(rec.steps)])


def test_a_run_equals_itself_at_every_step(record):
    again = run_config(stream(80, 40.0), NodeSettings(16, 129, enable_prefix_caching=False),
                       record=True).record
    out = compare(record, again)
    assert out["equal"] and out["first_difference"] is None
    assert out["steps_compared"] == record.steps
    assert f"{record.preemptions} preemptions" in out["verdict"]


def test_a_different_running_set_is_named_at_its_step(record):
    sched, pre = _lists(record)
    k = record.steps // 2
    sched[k] = sched[k][:-1]
    out = compare(StepRecord.from_lists(sched, pre), record)
    assert not out["equal"] and out["first_difference"]["step"] == k + 1
    assert out["first_difference"]["what"] == "scheduled requests"
    assert f"busy step {k + 1}" in out["verdict"]


def test_a_missing_preemption_and_a_short_run_are_differences(record):
    sched, pre = _lists(record)
    k = next(i for i, p in enumerate(pre) if p)
    pre[k] = []
    out = compare(StepRecord.from_lists(sched, pre), record)
    replay = ", ".join(map(str, record.preempted(k)))
    assert out["first_difference"] == {"step": k + 1, "what": "preempted requests",
                                       "node": "", "replay": replay}
    short = StepRecord.from_lists(*(x[:-3] for x in _lists(record)))
    assert compare(short, record)["first_difference"]["what"] == "step count"


def test_busy_steps_only_are_recorded(record):
    sizes = np.diff(record.sched_ptr) + np.diff(record.pre_ptr)
    assert np.all(sizes > 0)


def test_a_recording_without_the_request_log_says_how_to_make_one(tmp_path):
    from tests.fuzz.hostile import make_recording

    rec = make_recording(tmp_path / "run.db")
    assert is_recording(rec)
    with pytest.raises(KvvizError, match="no request log .record it with kvviz attach --blocks"):
        read_recording(rec)
    assert NO_REQUEST_LOG.startswith("this recording has no request log")
