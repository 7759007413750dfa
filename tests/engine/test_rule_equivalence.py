"""The compiled rule (kvviz/engine/rule) against the Python Lane, step by step: the plan
(requests and tokens, vLLM's order), the running order, every event, the block tables of
paged lanes and the BlockMap; then the summaries. Streams from the vLLM tier's strategy, on
paged (with and without prefix caching) and contiguous lanes."""
from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvviz.alloc import make_allocator
from kvviz.core.config import EngineConfig, LaneSpec
from kvviz.engine.eventlog import EventLog
from kvviz.engine.lane import Lane as RuleLane
from kvviz.engine.pylane import Lane
from tests.engine.vllm_ref import streams

SPECS = st.sampled_from([None, ("contiguous", "first-fit", "max"),
                         ("contiguous", "best-fit", "exact"), ("contiguous", "buddy", "pow2"),
                         ("contiguous", "first-fit", "pow2")])


def _pair(w, c, contiguous):
    bs = c["block_size"]
    if contiguous is None:
        spec = LaneSpec("paged", bs, prefix_caching=c["prefix"])
    else:
        spec = LaneSpec("contiguous", 1, placement=contiguous[1], reserve=contiguous[2])
    cap = c["num_blocks"] * bs
    eng = EngineConfig(max_num_seqs=c["max_num_seqs"],
                       max_batched_tokens=c["max_num_batched_tokens"],
                       watermark=c["watermark"], enable_chunked_prefill=c["chunked"],
                       step_ms=1000.0, max_seq_len=max(2, int((w.prompt + w.output).max())))
    alloc = make_allocator(spec, cap)
    py = Lane("x", spec, alloc, w, eng, EventLog())
    return py, RuleLane("x", spec, w, eng, cap), alloc


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(streams(), SPECS)
def test_compiled_rule_steps_as_the_python_lane(stream, contiguous):
    w, c = stream
    py, rule, alloc = _pair(w, c, contiguous)
    for step in range(1, 4000):
        if py.finished:
            break
        upto = int(np.searchsorted(w.arrival_s, float(step), side="right"))
        py.arrive(upto)
        if py.idle:
            py.skip_idle(1, float(step))
        else:
            py.step(float(step))
        rule.step_at(upto, float(step))
        assert rule.step_no == py.step_no
        assert rule.run_ids.tolist() == py.run_ids.tolist(), step
        if py.last_plan is not None and py.step_no == step and not py.idle:
            ids, _, counts = rule.scheduled()
            plan = py.last_plan
            assert ids.tolist() == plan.ids.tolist(), step
            assert counts.tolist() == plan.counts.tolist(), step
        mine = rule.drain(0, ("x",)).rows()
        cols, cursor = py.events.since(py.events.oldest)
        theirs = cols.rows()
        py.events.trim(cursor)
        assert mine == theirs, step
        if not alloc.contiguous:
            for r in py.run_ids.tolist():
                assert rule.alloc.block_table(r).tolist() == alloc.block_table(r).tolist(), step
        assert rule.snapshot() == py.snapshot(), step
    assert rule.finished and py.finished
    assert rule.summary() == py.summary()
