"""Queue windows (kvviz/engine/queue.py) at the steps they must ask: each case is built so
that skipping the one step the rule's answer changes at gives other events than stepping."""
from __future__ import annotations

from kvviz.core.config import CacheConfig, EngineConfig
from tests.engine.test_span_equivalence import _trace, assert_same


def test_the_step_after_prompts_that_spend_the_whole_budget_is_asked():
    """A (a long life) holds the memory while B, C, D wait for it. When A finishes, the
    next step admits B and C, whose prompts spend exactly the budget: D waits with memory
    free and no refusal. The step after must admit D (its budget pays two decodes only)."""
    w = _trace([0.0, 0.0, 0.0, 0.0], [2, 51, 51, 3], [100, 5, 5, 2])
    engine = EngineConfig(max_num_seqs=256, max_batched_tokens=102, max_seq_len=128)
    jump = assert_same(w, ["contiguous:first-fit:exact"], CacheConfig(capacity_tokens=120),
                       engine, [101, 103])
    lane = jump.lanes[0]
    assert lane.done == 4 and lane.preemptions == 0
    admitted = {e.seq_id: e.step for e in jump.events.events if e.kind == "admitted"}
    assert admitted[1] == admitted[2] and admitted[3] == admitted[1] + 1


def test_a_finish_while_the_queue_waits_is_asked_at_the_next_step():
    """Equal max reservations: every finish frees the range the head waits for."""
    w = _trace([0.0] * 6 + [0.5] * 4, [10] * 10, [30, 40, 50, 20, 25, 35, 5, 6, 7, 8])
    engine = EngineConfig(max_num_seqs=256, max_batched_tokens=8192, max_seq_len=64)
    jump = assert_same(w, ["contiguous:first-fit:max", "contiguous:buddy:max"],
                       CacheConfig(capacity_tokens=192), engine, [30, 60])
    assert all(x.done == 10 for x in jump.lanes)
