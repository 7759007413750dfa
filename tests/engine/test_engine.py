"""Engine in sim mode: completion, determinism, lanes in lockstep, preemption, failures."""
from __future__ import annotations

import numpy as np
import pytest

from kvviz.core import metrics
from kvviz.core.config import CacheConfig, EngineConfig, LaneSpec, WorkloadConfig
from kvviz.core.workload import Workload, generate
from kvviz.engine import Simulation

LANES = [LaneSpec.parse(t) for t in (
    "paged:16", "paged:1", "paged:16:prefix", "contiguous:first-fit:max",
    "contiguous:best-fit:pow2", "contiguous:buddy:exact")]
MAX_STEPS = 4000


def workload(rate=float("inf"), n=120, **kw) -> Workload:
    return generate(WorkloadConfig("sharegpt-like", num_requests=n, rate=rate, max_seq_len=1024,
                                   seed=7, **kw))


def sim(w, lanes=LANES, tokens=16384, **eng) -> Simulation:
    return Simulation(w, lanes, CacheConfig(capacity_tokens=tokens),
                      EngineConfig(max_seq_len=1024, **eng))


def without_wall(summaries):
    return [{k: v for k, v in s.items() if k != "wall_seconds"} for s in summaries]


@pytest.mark.parametrize("rate", [float("inf"), 20.0])
def test_every_request_finishes_on_every_lane(rate):
    s = sim(workload(rate, prefix_share=0.5, prefix_tokens=64))
    out = s.run(max_steps=MAX_STEPS)
    assert s.finished
    assert [x["finished"] for x in out] == [120] * len(LANES)
    assert all(x["rejected"] == 0 for x in out)


def test_tokens_generated_equal_the_sum_of_outputs():
    w = workload()
    out = sim(w).run(max_steps=MAX_STEPS)
    assert [x["tokens_generated"] for x in out] == [w.total_output_tokens] * len(LANES)


def test_the_same_seed_gives_the_same_summaries_and_events():
    runs = []
    for _ in range(2):
        s = sim(workload(20.0, prefix_share=0.5, prefix_tokens=64))
        runs.append((without_wall(s.run(max_steps=MAX_STEPS)), list(s.events.events)))
    assert runs[0] == runs[1]


def test_lanes_see_identical_request_streams():
    s = sim(workload(20.0))
    s.run(max_steps=MAX_STEPS)
    first_admit = {}
    for ev in s.events.events:
        if ev.kind == "admitted":
            first_admit.setdefault(ev.lane, {}).setdefault(ev.seq_id, ev.time_s)
    w = s.workload
    for lane, seen in first_admit.items():
        assert sorted(seen) == list(range(len(w))), lane
        ids = np.array(sorted(seen))
        times = np.array([seen[i] for i in ids])
        assert (times >= w.arrival_s[ids]).all(), lane  # nobody admitted before arriving


def test_preemption_happens_under_tight_capacity_and_preempted_requests_finish():
    w = workload(n=60)
    s = sim(w, [LaneSpec("paged", 16)], tokens=2048)
    out = s.run(max_steps=MAX_STEPS)[0]
    preempted = {e.seq_id for e in s.events.events if e.kind == "preempted"}
    finished = {e.seq_id for e in s.events.events if e.kind == "finished"}
    assert out["preemptions"] > 0
    assert out["preemptions"] == sum(e.kind == "preempted" for e in s.events.events)
    assert preempted <= finished
    assert out["finished"] == 60 and out["tokens_generated"] == w.total_output_tokens


@pytest.mark.parametrize("block_size, tokens, watermark", [(16, 2048, 0.0), (1, 4096, 0.01)])
def test_preemption_under_a_full_cache_keeps_making_progress(block_size, tokens, watermark):
    # When every running sequence fails its append at once, all are preempted and, memory now
    # free, all readmitted in the same step: the next step starts from the same full cache.
    w = workload(n=60)
    s = sim(w, [LaneSpec("paged", block_size)], tokens=tokens, watermark=watermark)
    out = s.run(max_steps=20000)[0]
    assert out["finished"] == 60, f"{out['finished']} finished, {out['preemptions']} preemptions"


def test_a_request_longer_than_the_whole_cache_does_not_loop_forever():
    w = Workload(np.zeros(1), np.array([60]), np.array([10]), np.array([-1]))
    s = Simulation(w, [LaneSpec("paged", 16)], CacheConfig(capacity_tokens=64))
    out = s.run(max_steps=2000)[0]
    assert s.finished, f"{out['preemptions']} preemptions in {out['steps']} steps"
    assert out["finished"] + out["rejected"] == 1


def test_admit_failed_events_carry_reason_and_free_and_largest_hole():
    s = sim(workload(), [LaneSpec.parse("contiguous:first-fit:exact")], tokens=4096)
    s.run(max_steps=MAX_STEPS)
    fails = [e for e in s.events.events if e.kind == "admit_failed"]
    assert fails
    for e in fails:
        assert e.reason in ("CAPACITY", "FRAGMENTATION", "POLICY")
        assert e.need_tokens > 0 and 0 <= e.largest_hole_tokens <= e.free_tokens
        if e.reason == "CAPACITY":
            assert e.free_tokens < e.need_tokens
        if e.reason == "FRAGMENTATION":
            assert e.largest_hole_tokens < e.need_tokens <= e.free_tokens


def test_failure_counts_match_the_events():
    s = sim(workload())
    out = s.run(max_steps=MAX_STEPS)
    for x in out:
        evs = [e for e in s.events.events if e.lane == x["lane"] and e.kind == "admit_failed"]
        for reason, count in x["admit_failures"].items():
            assert count == sum(e.reason == reason.upper() for e in evs), (x["lane"], reason)


def test_the_four_shares_sum_to_one_over_all_steps_and_over_pressure_steps():
    for x in sim(workload(20.0)).run(max_steps=MAX_STEPS):
        every = {k: x[f"{k}_share"] for k in ("used", "reserved", "internal", "free")}
        pressure = x["pressure_step_shares"] or {}
        for shares in (every, pressure) if x["pressure_steps"] else (every,):
            assert sum(shares[k] for k in every) == pytest.approx(1.0), x["lane"]
            assert min(shares[k] for k in every) >= 0


def test_max_reservation_fails_on_capacity_and_exact_sizes_fragment():
    lanes = [LaneSpec.parse(t) for t in ("contiguous:first-fit:max", "contiguous:first-fit:pow2",
                                          "contiguous:first-fit:exact")]
    out = {x["lane"]: x["admit_failures"]
           for x in sim(workload(n=300), lanes, tokens=8192).run(max_steps=MAX_STEPS)}
    mx = out["contiguous:first-fit:max"]
    assert mx["capacity"] > 0 and mx["fragmentation"] == 0
    assert out["contiguous:first-fit:pow2"]["fragmentation"] > 0
    assert out["contiguous:first-fit:exact"]["fragmentation"] > 0


def test_paged_lanes_never_fail_on_fragmentation():
    lanes = [spec for spec in LANES if spec.allocator == "paged"]
    for x in sim(workload(n=300), lanes, tokens=8192).run(max_steps=MAX_STEPS):
        if x["allocator"] == "paged":
            assert x["admit_failures"]["fragmentation"] == 0


def test_lane_snapshot_carries_final_lengths_so_metrics_split_slack():
    w = workload(n=40)
    s = sim(w, [LaneSpec.parse("contiguous:first-fit:max")], tokens=8192)
    for _ in range(5):
        s.step()
    lane = s.lanes[0]
    bm = lane.snapshot()
    assert sorted(bm.final_seq.tolist()) == sorted(lane.run_ids.tolist())
    assert (bm.final_len == w.final_len[bm.final_seq]).all()
    m = metrics.compute(bm)
    ids = lane.run_ids
    lens = lane.run_len  # slots written so far
    assert m.internal_tokens == int((1024 - w.final_len[ids]).sum())
    assert m.reserved_tokens == int((w.final_len[ids] - lens).sum())


@pytest.mark.parametrize("text", ["paged:16", "paged:16:prefix", "contiguous:best-fit:exact"])
def test_metrics_on_a_lane_snapshot_agree_with_the_lane_accounting(text):
    w = workload(n=40, prefix_share=1.0, prefix_tokens=64)
    s = sim(w, [LaneSpec.parse(text)], tokens=8192)
    lane = s.lanes[0]
    for _ in range(20):
        s.step()
        m = metrics.compute(lane.snapshot())
        held = lane.alloc.seq_allocated_tokens(lane.run_ids)
        internal = int(np.maximum(0, held - w.final_len[lane.run_ids]).sum())
        assert m.internal_tokens == internal
        assert m.reserved_tokens == m.slack_tokens - internal


def test_a_lane_snapshot_agrees_with_the_allocator_usage():
    s = sim(workload(n=60), tokens=8192)
    for _ in range(30):
        s.step()
        for lane in s.lanes:
            m = metrics.compute(lane.snapshot())
            u = lane.alloc.usage()
            assert (m.used_tokens, m.free_tokens) == (u.used_tokens, u.free_tokens), lane.name


def test_duplicate_lane_specs_get_distinct_names():
    s = sim(workload(n=5), [LaneSpec("paged", 16), LaneSpec("paged", 16)])
    assert [lane.name for lane in s.lanes] == ["paged:16", "paged:16#2"]


def test_no_lanes_is_an_error():
    with pytest.raises(ValueError, match="lanes"):
        sim(workload(n=5), [])


def test_a_prefix_caching_lane_under_memory_pressure_finishes_every_request():
    # evictions break a group's chain at its head; re-registering it must not corrupt the cache
    w = workload(20.0, prefix_share=0.5, prefix_tokens=64)
    s = sim(w, [LaneSpec.parse("paged:16:prefix")], tokens=4096)
    out = s.run(max_steps=MAX_STEPS)[0]
    assert any(e.kind == "evicted" for e in s.events.events)
    assert out["finished"] == len(w)


def test_metrics_split_internal_slack_of_sequences_that_share_prefix_blocks():
    # two requests, prompt 37 (32 shared = two blocks of 16), final 40: each holds 48 slots
    w = Workload(np.zeros(2), np.array([37, 37]), np.array([3, 3]), np.array([0, 0]),
                 prefix_tokens=32)
    s = sim(w, [LaneSpec.parse("paged:16:prefix")], tokens=1024)
    s.step()
    lane = s.lanes[0]
    assert lane.alloc.seq_allocated_tokens(lane.run_ids).tolist() == [48, 48]
    m = metrics.compute(lane.snapshot())
    assert (m.used_tokens, m.slack_tokens) == (42, 22)
    assert (m.reserved_tokens, m.internal_tokens) == (6, 16)


def test_the_event_columns_grow_with_what_runs_not_with_max_num_seqs():
    # no batch cap (10^6 sequences) once reserved room for 2M events per step: a 240 MB pool
    w = generate(WorkloadConfig("sharegpt-like", num_requests=200, seed=0))
    sim = Simulation(w, [LaneSpec.parse("paged:16")], CacheConfig(capacity_tokens=1_000_000),
                     EngineConfig(max_num_seqs=1_000_000, max_batched_tokens=10**9))
    sim.run()
    lane = sim.lanes[0]
    assert lane.done == 200
    assert len(sim.events) >= 400  # an admission and a finish each
    assert lane.pool.ev_step.size <= max(4096, 4 * len(sim.events))  # not 2M


def test_lanes_in_threads_equal_lanes_one_after_another(monkeypatch):
    # run() runs lanes side by side (the compiled loop releases the GIL): the same summaries
    # and the same merged event log as one lane after another, and progress is reported
    # from the calling thread (a page's progress bar lives there).
    import threading

    from kvviz.engine import simulation
    w = workload(rate=40.0, n=300)
    seen = []

    def progress(done, total):
        seen.append((threading.current_thread() is threading.main_thread(), done, total))

    monkeypatch.setattr(simulation, "LANE_THREADS", 3)
    a = sim(w)
    side = a.run(progress=progress)
    monkeypatch.setattr(simulation, "LANE_THREADS", 1)
    b = sim(w)
    alone = b.run()
    assert without_wall(side) == without_wall(alone)
    assert a.events.events == b.events.events and len(a.events) > 300
    assert seen and all(main for main, _, _ in seen)
    assert seen[-1][1:] == (300, 300)
