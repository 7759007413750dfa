"""The what-if runner: every number from a real run of the rule, cross-checked."""
from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest

from kvviz.core.errors import KvvizError
from kvviz.twin import Alternatives, plan, whatif
from kvviz.twin.configs import alternatives
from kvviz.twin.runner import arrival_steps, run_all, run_config
from kvviz.twin.selfcheck import compare
from kvviz.twin.settings import NodeSettings
from kvviz.twin.source import from_trace
from kvviz.twin.table import COMPARED
from tests.twin.streams import MODEL, stream

TIGHT = NodeSettings(block_size=16, num_gpu_blocks=257, enable_prefix_caching=False)


@pytest.fixture(scope="module")
def tight():
    return stream(150, 40.0)


def test_a_configuration_equal_to_the_baseline_shows_no_change(tight):
    src = from_trace(tight.workload, "s", TIGHT, MODEL, 20.0, tight.max_seq_len)
    res = whatif(src, alternatives({"block_size": "16", "max_num_seqs": "256,8"}), workers=1)
    base, same, fewer = res.table
    assert same["config"] == "= node's own" and same["settings"] == base["settings"]
    assert all(v == 0 for v in same["change"].values())
    assert base["preemptions"] > 0  # the stream presses this pool: the zeros are not trivial
    assert fewer["config"] == "seqs 8" and fewer["change"]["preemptions"] != 0
    assert set(COMPARED) == set(fewer["change"])


def test_ample_memory_neither_preempts_nor_refuses_for_memory(tight):
    need = int(((tight.workload.final_len + 15) // 16).sum()) + 1
    r = run_config(tight, NodeSettings(16, need + 1, enable_prefix_caching=False))
    assert r.summary["preemptions"] == 0 and r.summary["admit_failures"]["capacity"] == 0
    assert r.blocks_peak < need


def test_blocks_in_use_stay_within_the_pool_and_agree_with_the_engine_shares(tight):
    r = run_config(tight, TIGHT)
    assert 0 < r.blocks_mean <= r.blocks_peak <= TIGHT.usable_blocks
    held = 1.0 - r.summary["free_share"]  # the engine's own time average of held slots
    assert r.blocks_mean * 16 / TIGHT.capacity_tokens == pytest.approx(held, rel=1e-9)
    assert r.curve_blocks.max() == r.blocks_peak
    assert r.curve_preempted[-1] == r.summary["preemptions"]
    assert np.all(np.diff(r.curve_step) > 0) and np.all(np.diff(r.curve_preempted) >= 0)


@pytest.mark.parametrize("prefix", [False, True])
def test_the_compiled_occupancy_log_equals_reading_the_pool_after_each_stepped_step(prefix):
    """run_config's one compiled call logs the blocks held after each step; stepping the same
    run from Python and reading the pool after each step gives the same entries. The log is
    started small, so it grows (advance stops FULL) many times on the way."""
    from kvviz.engine import Simulation
    from kvviz.engine.rule import build
    from tests.twin.stepped import step_through

    # idle spans between the arrivals
    sparse = stream(200, 0.3, prefix=0.5 if prefix else 0.0)
    settings = NodeSettings(16, 257, enable_prefix_caching=prefix)

    def sim():
        return Simulation(sparse.workload, [settings.lane()], settings.cache(sparse.model),
                          settings.engine(sparse.step_ms, sparse.max_seq_len))

    stepped = step_through(sim())
    fast = sim()
    lane = fast.lanes[0]
    lane.pool = lane.pool._replace(**build.held_log(4))
    lane.log_held()
    fast.run()
    steps, blocks = lane.held_log()
    logged = steps, blocks, np.diff(steps, prepend=0)
    assert stepped[1].max() > 0 and (stepped[2] > 1).any()  # blocks held, idle spans
    for a, b in zip(stepped, logged):
        np.testing.assert_array_equal(a, b)


def test_queueing_starts_at_arrival_and_every_finished_request_was_admitted(tight):
    r = run_config(tight, TIGHT)
    assert r.queue_steps.size == r.summary["finished"] == len(tight.workload)
    assert r.queue_steps.min() == 0 and r.queue_steps.max() > 0


def test_one_seat_queues_each_request_behind_the_one_before():
    s = stream(6, float("inf"))
    r = run_config(s, NodeSettings(16, 2049, max_num_seqs=1, enable_prefix_caching=False))
    q = np.sort(r.queue_steps)
    assert q[0] == 0 and np.all(np.diff(q) > 0)  # all arrive at once; one runs at a time


def test_arrival_steps_follow_the_simulation_clock():
    a = np.array([0.0, 0.02, 0.0200001, 0.1, 0.059999999])
    assert arrival_steps(a, 20.0).tolist() == [1, 1, 2, 5, 3]


def test_the_pool_gives_what_one_process_gives(tight):
    """Two workers, three configurations (a worker runs two, one after the other), the
    baseline with its record."""
    configs = plan(from_trace(tight.workload, "s", TIGHT, MODEL, 20.0, tight.max_seq_len),
                   alternatives({"block_size": "32,64"}))
    assert len(configs) == 3
    one = run_all(tight, configs, workers=1, record_first=True)
    two = run_all(tight, configs, workers=2, record_first=True)
    for a, b in zip(one, two):
        assert a.settings == b.settings and a.summary["steps"] == b.summary["steps"]
        assert a.summary["preemptions"] == b.summary["preemptions"]
        assert np.array_equal(a.queue_steps, b.queue_steps)
    assert two[0].record is not None and two[1].record is None
    assert compare(one[0].record, two[0].record)["equal"]
    assert np.array_equal(one[0].record.busy, two[0].record.busy)


def test_a_configuration_that_fails_in_a_worker_raises_its_error(tight):
    late = dataclasses.replace(tight.workload, arrival_s=tight.workload.arrival_s + 1e18)
    configs = [TIGHT, NodeSettings(32, 129, enable_prefix_caching=False)]
    with pytest.raises(KvvizError, match="arrives at"):
        run_all(dataclasses.replace(tight, workload=late), configs, workers=2)


class _Dies:
    """Unpickled in a worker, it ends that process at once (exit 3)."""

    def __reduce__(self):
        return os._exit, (3,)


def test_a_worker_that_dies_is_named_with_its_exit_status(tight):
    configs = [TIGHT, NodeSettings(32, 129, enable_prefix_caching=False)]
    with pytest.raises(RuntimeError, match=r"worker stopped \(exit 3\) without an answer"):
        run_all(dataclasses.replace(tight, workload=_Dies()), configs, workers=2)


def test_the_baseline_alone_runs_when_no_alternative_is_given(tight):
    src = from_trace(tight.workload, "s", TIGHT, MODEL, 20.0, tight.max_seq_len)
    res = whatif(src, Alternatives(), workers=1)
    assert len(res.table) == 1 and res.table[0]["baseline"]
    assert res.self_check["equal"] is None and "no node run" in res.self_check["verdict"]
