""""Usage looks low, why are requests waiting?": each branch of diagnose.usage_and_waiting on a
synthetic stream (and the node's gauges), and silence where there is nothing to say."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as hst

from kvviz.node.kvevents import diagnose
from kvviz.node.kvevents.decode import REMOVED, STORED, Event
from kvviz.node.kvevents.diagnose import Gauges, gauges_from_scrapes, usage_and_waiting
from kvviz.node.kvevents.model import CacheModel
from tests.examples import examples


def _model(cached: int, churn: int = 0) -> CacheModel:
    """`cached` blocks stored (one chain), then `churn` blocks evicted and stored again."""
    m = CacheModel()
    m.apply(1, 0, [Event(STORED, list(range(cached)), None, None, 16, None, 0)], 0.0)
    for h in range(churn):
        m.apply(1, 0, [Event(REMOVED, [h], None, None, 0, None, 0)], 1.0)
        m.apply(1, 0, [Event(STORED, [h], None, None, 16, None, 0)], 2.0)
    return m


def test_most_cached_blocks_are_evictable_when_usage_is_below_the_cached_count():
    (msg,) = usage_and_waiting(_model(800), Gauges(kv_usage=0.1, num_gpu_blocks=1000))
    assert "100 of 1,000 blocks in use" in msg and "800 cached blocks" in msg
    assert "at least 700 (88%)" in msg and "evictable" in msg


def test_without_gauges_it_says_what_events_cannot_tell():
    (msg,) = usage_and_waiting(_model(10))
    assert "10 cached blocks (160 tokens)" in msg and "no request ids" in msg


def test_waiting_at_the_max_num_seqs_limit_with_low_usage_is_a_scheduler_limit():
    g = Gauges(kv_usage=0.3, num_gpu_blocks=1000, num_running=8, num_waiting=5, max_running=8)
    msg = usage_and_waiting(_model(100), g, recent=(40, 0))[-1]
    assert msg.startswith("5 requests wait while KV usage is only 30%")
    assert "max-num-seqs of 8" in msg and "binds" in msg and "stalled" not in msg


def test_stalled_stores_while_requests_wait_say_admission_has_stalled():
    g = Gauges(kv_usage=0.2, num_gpu_blocks=1000, num_running=4, num_waiting=3)
    msg = usage_and_waiting(_model(100), g, recent=(0, 0), window_s=20)[-1]
    assert "No block was stored in the last 20 s" in msg and "likely cause" in msg


def test_a_flat_running_count_is_named_as_a_limit():
    rows = [{"status": "ok", "num_running": r, "num_waiting": 2, "kv_usage": 0.2,
             "num_gpu_blocks": 100} for r in (3, 6, 6, 6)]
    g = gauges_from_scrapes(rows)
    assert g.running_flat and g.num_running == 6
    msg = usage_and_waiting(_model(1), g)[-1]
    assert "6 requests have run in every recent scrape" in msg


def test_waiting_with_high_usage_is_a_memory_limit():
    g = Gauges(kv_usage=0.95, num_gpu_blocks=100, num_running=4, num_waiting=3)
    msg = usage_and_waiting(_model(10), g, recent=(5, 7))[-1]
    assert "memory is the limit" in msg and "7 cached blocks were evicted" in msg


def test_heavy_remove_churn_is_recompute():
    (msg,) = usage_and_waiting(_model(100, churn=40), Gauges(kv_usage=0.9, num_gpu_blocks=1000))
    assert msg.startswith("40 of 140 stored blocks (29%)") and "computed again" in msg


def test_light_churn_and_no_waiting_say_nothing():
    g = Gauges(kv_usage=0.9, num_gpu_blocks=1000, num_running=3, num_waiting=0)
    assert usage_and_waiting(_model(100, churn=5), g) == []


def test_scrapes_without_an_ok_one_give_no_gauges():
    assert gauges_from_scrapes([{"status": "unreachable"}]) is None
    assert diagnose.gauges_from_scrapes([]) is None


@settings(max_examples=examples(60), deadline=None)
@given(rows=hst.lists(hst.fixed_dictionaries(
    {"status": hst.sampled_from(["ok", "unreachable"])},
    optional={k: hst.one_of(hst.none(), hst.floats(), hst.integers(-2**70, 2**70),
                            hst.text(max_size=3))
              for k in ("kv_usage", "num_gpu_blocks", "num_running", "num_waiting")}),
    max_size=6), cached=hst.integers(0, 40), recent=hst.none() | hst.tuples(
        hst.integers(0, 9), hst.integers(0, 9)))
def test_any_scrape_gives_gauges_or_none_and_sentences(rows, cached, recent):
    g = gauges_from_scrapes(rows)
    lines = usage_and_waiting(_model(cached) if cached else CacheModel(), g, recent)
    assert all(isinstance(line, str) and line for line in lines)
    assert not any(line.startswith("-") for line in lines)  # no negative request counts


def test_the_engines_own_reasons_and_a_recent_preemption_are_named_with_their_source():
    rows = [{"status": "ok", "t": float(t), "kv_usage": 0.3, "num_gpu_blocks": 72,
             "kv_capacity_tokens": 71 * 32, "block_size": 32, "num_running": 4,
             "num_waiting": 1, "num_waiting_capacity": 1, "num_waiting_deferred": 0,
             "preemptions_total": float(p)} for t, p in ((0, 2), (2, 2), (4, 3))]
    g = gauges_from_scrapes(rows)
    assert (g.usable_blocks, g.preempted_recent, g.recent_s) == (71, 1, 4.0)
    (msg,) = [m for m in usage_and_waiting(_model(10), g) if "wait" in m and "engine" in m]
    assert "num_requests_waiting_by_reason" in msg and "1 waiting for scheduling capacity" in msg
    assert "preempted 1 running request" in msg and "vllm:num_preemptions" in msg
    assert "memory is not what holds them back" not in msg
    assert "kvviz's reading:" in msg


def test_usage_counts_blocks_as_the_engine_does_without_its_null_block():
    g = Gauges(kv_usage=0.5, num_gpu_blocks=72, usable_blocks=71)
    (msg,) = usage_and_waiting(_model(60), g)
    assert "36 of 71 blocks" in msg  # round(0.5 * 71)


def test_when_the_engine_says_capacity_memory_is_not_ruled_out_at_low_usage():
    # one request of 41 blocks runs, one of 41 blocks waits: usage 58%, 30 blocks free
    g = Gauges(kv_usage=41 / 71, num_gpu_blocks=72, usable_blocks=71, num_running=1,
               num_waiting=1, waiting_capacity=1, waiting_deferred=0)
    (msg,) = [m for m in usage_and_waiting(_model(41), g) if "wait" in m]
    assert "memory is not what holds them back" not in msg
    assert "30 blocks free" in msg and "wait for capacity" in msg


def test_waiting_for_capacity_at_max_num_seqs_names_that_limit_not_cannot_tell():
    """8 running, 8 waiting "for capacity" (vLLM's reason), usage 35%, max-num-seqs 8 in the
    node's config: the limit is named, not "the gauges cannot tell which"."""
    g = Gauges(kv_usage=0.35, num_gpu_blocks=72, usable_blocks=71, num_running=8,
               num_waiting=8, max_running=8, waiting_capacity=8, waiting_deferred=0)
    msg = usage_and_waiting(_model(10), g)[-1]
    assert "max-num-seqs of 8" in msg and "binds" in msg and "cannot tell" not in msg
    below = g.__class__(**{**g.__dict__, "num_running": 5})
    assert "cannot tell" in usage_and_waiting(_model(10), below)[-1]


def test_recent_preemptions_say_their_window_beside_the_latest_interval_rate():
    rows = [{"status": "ok", "t": float(t), "kv_usage": 0.35, "num_running": 8,
             "num_waiting": 8, "preemptions_total": float(t), "preemptions_per_s": 0.0}
            for t in range(47)]
    g = gauges_from_scrapes(rows)
    msg = usage_and_waiting(_model(10), g)[-1]
    assert "46 running request(s) over the last 46 s" in msg
    assert "latest interval alone: 0.00/s, the Preemptions/s figure" in msg
