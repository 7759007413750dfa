"""The self-check: the replay's per-step record against the node's; the first difference named."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from kvviz.core.errors import KvvizError
from kvviz.twin.runner import run_config
from kvviz.twin.selfcheck import StepRecord, Tables, compare
from kvviz.twin.settings import NodeSettings
from kvviz.twin.source import NO_REQUEST_LOG, is_recording, read_recording
from tests.twin.streams import stream

SETTINGS = NodeSettings(16, 129, enable_prefix_caching=False)


@pytest.fixture(scope="module")
def record() -> StepRecord:
    r = run_config(stream(80, 40.0), SETTINGS, record=True)
    assert r.record is not None and r.record.preemptions == r.summary["preemptions"] > 0
    return r.record


def _without(rec: StepRecord, name: str, i: int) -> StepRecord:
    """`rec` with the i-th entry of one list left out."""
    steps, ids = rec.lists[name]
    keep = np.arange(steps.size) != i
    return dataclasses.replace(rec, lists={**rec.lists, name: (steps[keep], ids[keep])})


def test_a_run_equals_itself_at_every_step(record):
    again = run_config(stream(80, 40.0), SETTINGS, record=True).record
    out = compare(record, again)
    assert out["equal"] and out["first_difference"] is None
    assert out["steps_compared"] == record.steps
    assert out["block_steps_compared"] == len(record.tables) == record.steps
    assert f"{record.preemptions} preemptions" in out["verdict"]
    assert "scheduled, admitted, preempted and finished" in out["verdict"]


def test_a_missing_admission_is_named_at_its_step(record):
    i = record.lists["admitted"][0].size // 2
    step = int(record.lists["admitted"][0][i])
    out = compare(_without(record, "admitted", i), record)
    assert not out["equal"] and out["first_difference"]["step"] == step
    assert out["first_difference"]["what"] == "requests admitted"
    assert f"engine step {step}" in out["verdict"]
    assert out["steps_compared"] == record.busy_before(step)


def test_a_missing_preemption_and_a_short_run_are_differences(record):
    step = int(record.lists["preempted"][0][0])
    out = compare(_without(record, "preempted", 0), record)
    replay = ", ".join(map(str, record.at("preempted", step)))
    assert out["first_difference"]["step"] == step
    assert out["first_difference"]["what"] == "requests preempted"
    assert out["first_difference"]["replay"] == replay
    runs = record.busy.copy()
    runs[-1, 1] -= 3
    short = dataclasses.replace(record, busy=runs)
    assert compare(short, record)["first_difference"]["what"] == "whether the step ran"


def test_a_record_that_ends_early_is_compared_up_to_its_end(record):
    end = int(record.busy[len(record.busy) // 2, 1])
    cut = {k: (s[s <= end], i[s <= end]) for k, (s, i) in record.lists.items()}
    node = dataclasses.replace(record, lists=cut, end_step=end, end_reason="the test cut it",
                               notes=("one thing named",))
    out = compare(node, record)
    assert out["equal"] and out["steps_compared"] == record.busy_before(end + 1)
    assert f"compared up to engine step {end} (the test cut it)" in out["verdict"]
    assert out["not_replayed"] == ["one thing named"] and "one thing named" in out["verdict"]


def test_the_running_set_alone_is_compared_when_the_node_has_no_scheduled_lists(record):
    lists = {k: v for k, v in record.lists.items() if k != "scheduled"}
    out = compare(dataclasses.replace(record, lists=lists), record)
    assert out["equal"] and "holds no per-step scheduled lists" in out["verdict"]


def _renumbered(rec: StepRecord, perm: dict) -> StepRecord:
    tabs = {s: Tables(t.seqs, t.lens, np.array([perm.get(int(b), int(b)) for b in t.blocks],
                                               np.int64)) for s, t in rec.tables.items()}
    return dataclasses.replace(rec, tables=tabs)


def test_block_ids_under_one_renumbering_are_equal_only_when_the_node_says_so(record):
    used = sorted({int(b) for t in record.tables.values() for b in t.blocks})
    perm = dict(zip(used, reversed(used)))  # one fixed renumbering of the pool
    node = _renumbered(record, perm)
    exact = compare(node, record)
    assert not exact["equal"] and exact["first_difference"]["what"].startswith("block ids")
    out = compare(dataclasses.replace(node, block_ids="renumbered"), record)
    assert out["equal"] and "under one renumbering" in out["verdict"]


def test_two_renumberings_are_a_difference(record):
    steps = sorted(record.tables)
    half = steps[len(steps) // 2]
    used = sorted({int(b) for t in record.tables.values() for b in t.blocks})
    a, b = dict(zip(used, reversed(used))), dict(zip(used, used[1:] + used[:1]))
    node = _renumbered(record, a)
    later = _renumbered(record, b)
    tabs = {s: (node.tables[s] if s < half else later.tables[s]) for s in steps}
    out = compare(dataclasses.replace(node, tables=tabs, block_ids="renumbered"), record)
    assert not out["equal"] and out["first_difference"]["step"] >= half
    assert "under one renumbering" in out["first_difference"]["what"]


def test_from_steps_carries_the_running_set_between_the_steps_listed():
    rec = StepRecord.from_steps([3, 8, 9], [[1], [2], []], [[], [], [1]], [[], [], [2]])
    assert rec.busy.tolist() == [[3, 9]] and rec.steps == 7
    assert rec.at("admitted", 8).tolist() == [2] and rec.preemptions == 1


def test_a_recording_without_the_request_log_says_how_to_make_one(tmp_path):
    from tests.fuzz.hostile import make_recording

    rec = make_recording(tmp_path / "run.db")
    assert is_recording(rec)
    with pytest.raises(KvvizError, match="no request log .record it with kvviz attach --blocks"):
        read_recording(rec)
    assert NO_REQUEST_LOG.startswith("this recording has no request log")
