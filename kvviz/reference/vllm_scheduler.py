"""vLLM's own v1 Scheduler and KVCacheManager, driven in-process with no model: the
reference kvviz's scheduling rule (kvviz/engine/rule/scheduler.py) is checked against.

Written for vLLM 0.32.0 (its internal API: Scheduler(vllm_config, kv_cache_config, ...),
schedule(), update_from_output(SchedulerOutput, ModelRunnerOutput)); any other version is
refused. With kvviz/plugin/vllm_entry.py, the only kvviz modules that import vllm; it runs in
the vLLM venv's python:

    python -m kvviz.reference.vllm_scheduler < job.json > result.json
    python -m kvviz.reference.vllm_scheduler --serve   (one case per input line, one
                                                          result per output line)

A job is {"cases": [case, ...]}; a case gives block_size, num_blocks (usable blocks: vLLM
gets one more, its null block 0), max_num_seqs, max_num_batched_tokens,
enable_chunked_prefill, enable_prefix_caching, watermark, max_model_len, max_steps and
requests [{"arrival_step", "tokens" (prompt then outputs), "prompt"}]. Before step s the
requests arriving at s are added; schedule() runs, then a fake model output samples, for
every request whose KV caught up, the next token of its list (the way vLLM's tests in
tests/v1/core drive a scheduler). Per step with work the result records the tokens scheduled
per request, the preempted, the hit tokens of each admission, the finished, then (after the
update) the running requests in order and each one's block ids; at the end vLLM's own
prefix-cache counters (queries and hits, resumed requests included), the last step and the
preemptions, and the seconds the loop took. "record": false keeps only the totals;
"kv_events": true also records, per step, the KV events vLLM would publish (one entry per
block: stored or removed, and its hash).
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import time

VERSION = "0.32.0"
MODEL = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
         "intermediate_size": 128, "num_attention_heads": 2, "num_hidden_layers": 2,
         "num_key_value_heads": 2, "head_dim": 32, "max_position_embeddings": 1 << 20,
         "vocab_size": 1 << 31, "rms_norm_eps": 1e-6, "bos_token_id": 1, "eos_token_id": 2,
         "tie_word_embeddings": False}


def _check_version() -> None:
    try:
        import vllm
    except ImportError:
        sys.exit(f"kvviz.reference.vllm_scheduler needs vLLM {VERSION} (its internal scheduler "
                 f"API); this python ({sys.executable}) has no vllm. Use the vLLM venv "
                 "(KVVIZ_VLLM_VENV).")
    if getattr(vllm, "__version__", None) != VERSION:
        sys.exit(f"kvviz.reference.vllm_scheduler was written for vLLM {VERSION}'s internal "
                 f"scheduler API; this python has vLLM {vllm.__version__}. Use a venv with "
                 f"vllm=={VERSION} (KVVIZ_VLLM_VENV).")


def make_scheduler(case: dict, model_dir: str):
    import torch
    from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, VllmConfig
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.structured_output import StructuredOutputManager

    bs, n = case["block_size"], case["num_blocks"] + 1  # + vLLM's null block
    mml = case["max_model_len"]
    model = ModelConfig(model=model_dir, skip_tokenizer_init=True, max_model_len=mml,
                        dtype="float32")
    sched = SchedulerConfig(max_num_seqs=case["max_num_seqs"], max_model_len=mml,
                            max_num_batched_tokens=case["max_num_batched_tokens"],
                            enable_chunked_prefill=case["enable_chunked_prefill"],
                            is_encoder_decoder=False, async_scheduling=False,
                            watermark=case["watermark"])
    cache = CacheConfig(block_size=bs, enable_prefix_caching=case["enable_prefix_caching"])
    kw = {}
    if case.get("kv_events"):  # the KV events vLLM would publish, caught per step
        from vllm.config import KVEventsConfig

        kw["kv_events_config"] = KVEventsConfig(enable_kv_cache_events=True, publisher="null")
    config = VllmConfig(model_config=model, scheduler_config=sched, cache_config=cache, **kw)
    config.cache_config.num_gpu_blocks = n
    spec = FullAttentionSpec(block_size=bs, num_kv_heads=1, head_size=1, dtype=torch.float32)
    kv = KVCacheConfig(num_blocks=n, kv_cache_tensors=[],
                       kv_cache_groups=[KVCacheGroupSpec(["layer.0"], spec)])
    return Scheduler(vllm_config=config, kv_cache_config=kv,
                     structured_output_manager=StructuredOutputManager(config),
                     block_size=bs, log_stats=True)


def run_case(case: dict, model_dir: str) -> dict:
    from vllm.sampling_params import SamplingParams
    from vllm.utils.hashing import get_hash_fn_by_name
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.outputs import ModelRunnerOutput
    from vllm.v1.request import Request

    s = make_scheduler(case, model_dir)
    caught: list = []
    if case.get("kv_events"):
        class Catch:  # stands in for the publisher update_from_output hands each batch to
            def publish(self, batch) -> None:
                caught.extend(batch.events)

            def shutdown(self) -> None:
                pass

        s.kv_event_publisher = Catch()
    hash_fn = get_hash_fn_by_name(s.cache_config.prefix_caching_hash_algo)
    init_none_hash(hash_fn)
    hasher = get_request_block_hasher(case["block_size"], hash_fn)
    reqs = case["requests"]
    by_step: dict[int, list[int]] = {}
    for i, r in enumerate(reqs):
        by_step.setdefault(r["arrival_step"], []).append(i)
    steps, left = [], len(reqs)
    record = case.get("record", True)  # False: totals only (the speed benchmark)
    totals = {"steps": 0, "preemptions": 0}
    queries = hits = 0
    t0 = time.perf_counter()
    for step in range(1, case["max_steps"] + 1):
        for i in by_step.get(step, ()):
            r = reqs[i]
            sp = SamplingParams(max_tokens=len(r["tokens"]) - r["prompt"], ignore_eos=True)
            s.add_request(Request(str(i), r["tokens"][:r["prompt"]], sp, None,
                                  block_hasher=hasher))
        if not s.has_requests():
            if not left:
                break
            continue
        before = {q.request_id for q in s.running}
        out = s.schedule()
        stats = s.kv_cache_manager.make_prefix_cache_stats()  # (update_from_output resets it)
        queries += stats.queries + stats.preempted_queries
        hits += stats.hits + stats.preempted_hits
        running = [q.request_id for q in s.running]
        sched = dict(out.num_scheduled_tokens)
        admitted = {q: s.requests[q].num_computed_tokens - sched[q]
                    for q in running if q not in before}
        ids = list(sched)
        sampled = []
        for q in ids:
            req = s.requests[q]
            if req.num_computed_tokens >= req.num_tokens:
                sampled.append([reqs[int(q)]["tokens"][req.num_tokens]])
            else:
                sampled.append([])
        mro = ModelRunnerOutput(req_ids=ids, req_id_to_index={q: k for k, q in enumerate(ids)},
                                sampled_token_ids=sampled)
        s.update_from_output(out, mro)
        after = [q.request_id for q in s.running]
        finished = [q for q in running if q not in set(after)]
        left -= len(finished)
        if not sched and before == set(after):  # a step that only reports past finishes
            continue
        totals["steps"] = step
        totals["preemptions"] += len(before - set(running))
        if not record:
            if not left:
                break
            continue
        blocks = {q: list(s.kv_cache_manager.get_block_ids(q)[0]) for q in after}
        kv = []  # per block: ("S" | "R", hash) in the order vLLM emitted them
        for e in caught:
            tag = {"BlockStored": "S", "BlockRemoved": "R"}.get(type(e).__name__, "C")
            kv.extend([tag, str(h)] for h in getattr(e, "block_hashes", [None]))
        caught.clear()
        steps.append({"step": step, "kv": kv, "running": [int(q) for q in after],
                      "scheduled": {q: n for q, n in sched.items()},
                      "preempted": sorted(int(q) for q in before - set(running)),
                      "finished": [int(q) for q in finished], "hits": admitted,
                      "blocks": blocks})
        if not left:
            break
    return {"steps": steps, "queries": queries, "hits": hits, "totals": totals,
            "loop_seconds": time.perf_counter() - t0}


def main() -> None:
    _check_version()
    with tempfile.TemporaryDirectory(prefix="kvviz-vllm-ref-") as d:
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(MODEL, f)
        if "--serve" in sys.argv[1:]:
            print(json.dumps({"vllm": VERSION}), flush=True)
            for line in sys.stdin:  # a case vLLM refuses answers {"error": ...}
                try:
                    out = run_case(json.loads(line), d)
                except Exception as exc:  # noqa: BLE001 (reported to the caller as text)
                    out = {"error": f"{type(exc).__name__}: {exc}"}
                print(json.dumps(out), flush=True)
            return
        results = [run_case(c, d) for c in json.load(sys.stdin)["cases"]]
    json.dump({"vllm": VERSION, "results": results}, sys.stdout)


if __name__ == "__main__":
    main()
