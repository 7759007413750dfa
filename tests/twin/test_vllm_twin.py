"""The twin against vLLM 0.32's own Scheduler (in-process, no model; the vLLM tier): its
per-step record is the "node", the twin's baseline equals it step by step, and a what-if
prediction for other settings equals what vLLM does at those settings."""
from __future__ import annotations

import pytest

from kvviz.core.config import model_preset
from kvviz.twin import whatif
from kvviz.twin.configs import alternatives
from kvviz.twin.runner import Stream, run_config
from kvviz.twin.selfcheck import StepRecord, compare
from kvviz.twin.settings import NodeSettings
from kvviz.twin.source import Source
from tests.engine.test_vllm_tier import _shared
from tests.engine.vllm_ref import VllmServer, case

pytestmark = pytest.mark.vllm
NODE = dict(max_num_seqs=6, max_num_batched_tokens=128)


@pytest.fixture(scope="module")
def vllm():
    server = VllmServer()
    yield server
    server.close()


def node_record(ref: dict, every: int = 1) -> StepRecord:
    """vLLM's steps as the node's own record: per step the requests scheduled, admitted
    (running after the step or finished in it, and not running before), preempted and
    finished, and the block tables of every `every`-th step (a node's sampled maps)."""
    steps, before, admitted = ref["steps"], set(), []
    for s in steps:
        admitted.append(sorted((set(s["running"]) | set(s["finished"])) - before))
        before = set(s["running"])
    return StepRecord.from_steps([s["step"] for s in steps], admitted,
                                 [s["preempted"] for s in steps],
                                 [s["finished"] for s in steps],
                                 [[int(q) for q in s["scheduled"]] for s in steps],
                                 [s["blocks"] if k % every == 0 else None
                                  for k, s in enumerate(steps)])


def settings_of(c: dict) -> NodeSettings:
    return NodeSettings(c["block_size"], c["num_blocks"] + 1, c["max_num_seqs"],
                        c["max_num_batched_tokens"], c["enable_chunked_prefill"],
                        c["watermark"], c["enable_prefix_caching"])


def test_the_baseline_equals_vllm_and_a_prediction_equals_vllm_at_its_settings(vllm):
    w = _shared(3, 60, 40)
    first = case(w, num_blocks=24, prefix=True, **NODE)
    ref = vllm.run(first)
    stream = Stream(w, model_preset("llama-3-8b"), 1000.0, first["max_model_len"])
    node = Source("vllm", stream, settings_of(first), node_record(ref, every=3))
    res = whatif(node, alternatives({"block_size": "32", "num_gpu_blocks": "13"}), workers=1)
    check = res.self_check
    assert check["equal"], check["verdict"]
    assert check["steps_compared"] == len(ref["steps"]) and ref["totals"]["preemptions"] > 0
    assert check["block_steps_compared"] == len(ref["steps"][::3])
    assert "every block id" in check["verdict"]
    assert res.table[0]["preemptions"] == ref["totals"]["preemptions"]
    (pred,) = res.table[1:]
    second = case(w, block_size=32, num_blocks=12, prefix=True, **NODE)  # 13 with the null
    ref2 = vllm.run(second)
    assert pred["preemptions"] == ref2["totals"]["preemptions"]
    assert pred["steps"] == ref2["totals"]["steps"]
    again = run_config(stream, settings_of(second), record=True)
    assert compare(node_record(ref2), again.record)["equal"]


def test_a_different_node_is_named_at_its_first_step(vllm):
    w = _shared(5, 40, 30)
    ref = vllm.run(case(w, num_blocks=20, prefix=True, **NODE))
    stream = Stream(w, model_preset("llama-3-8b"), 1000.0, case(w)["max_model_len"])
    other = run_config(stream, NodeSettings(16, 41, 6, 128, True, 0.0, True), record=True)
    out = compare(node_record(ref), other.record)  # the node had 19 usable blocks, not 40
    assert not out["equal"] and out["first_difference"]["step"] >= 1


def test_one_wrong_block_id_is_named(vllm):
    w = _shared(3, 30, 20)
    c = case(w, num_blocks=24, prefix=True, **NODE)
    ref = vllm.run(c)
    mine = run_config(Stream(w, model_preset("llama-3-8b"), 1000.0, c["max_model_len"]),
                      settings_of(c), record=True).record
    k = next(i for i, s in enumerate(ref["steps"]) if s["blocks"])
    r = sorted(ref["steps"][k]["blocks"])[0]
    ref["steps"][k]["blocks"][r] = [b + 1 for b in ref["steps"][k]["blocks"][r]]
    out = compare(node_record(ref), mine)
    assert out["first_difference"]["step"] == ref["steps"][k]["step"]
    assert out["first_difference"]["what"] == f"block ids of request {r}"
