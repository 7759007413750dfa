"""A longer, wider fidelity soak than the vLLM tier (tests/engine/test_vllm_tier.py): random
streams for SECONDS, each run through vLLM 0.32's own scheduler (the tier's reference process)
and through kvviz twice: the Lane stepped one step at a time, compared per step (scheduled
tokens, preemptions, finishes, hits, running order, block ids, KV events), and the whole
Simulation (its fast paths), compared on the totals (steps, preemptions, finishes).

    KVVIZ_VLLM_VENV=... python -m tests.engine.vllm_soak [SECONDS]      (default 600)

Wider than the tier's hypothesis streams: block sizes 1-32, up to 60 requests, prompts up to
300 and outputs up to 120 tokens, caches from just enough to 400 blocks more, up to 32
sequences, watermarks up to 0.5, prompts sharing chains or repeating earlier ones exactly.
Prints the count, or the first stream that differs and how. Not part of the test run."""
from __future__ import annotations

import sys
import time
import warnings

from kvviz.core.config import CacheConfig, EngineConfig, LaneSpec
from kvviz.engine import Simulation
from tests.engine.vllm_ref import VllmServer, assert_same, case, run_kvviz, streams

WIDE = {"sizes": (1, 2, 4, 8, 16, 32), "most": 60, "prompt_hi": 300, "output_hi": 120,
        "arrive_hi": 40, "extra_blocks": (2, 10, 60, 400), "seqs_hi": 32, "budget_hi": 600,
        "whole_budget_hi": 900, "watermarks": (0.0, 0.0, 0.01, 0.05, 0.2, 0.5), "groups": 4,
        "chain_modes": (0, 1, 2)}  # tests.engine.vllm_ref.streams's ranges, wider


def check(srv: VllmServer, w, kw: dict) -> None:
    c = case(w, **kw)
    ref = srv.run(c)
    assert_same(run_kvviz(w, c), ref, f"soak {kw}")
    eng = EngineConfig(max_num_seqs=c["max_num_seqs"],
                       max_batched_tokens=c["max_num_batched_tokens"],
                       watermark=c["watermark"], enable_chunked_prefill=c["enable_chunked_prefill"],
                       step_ms=1000.0, max_seq_len=c["max_model_len"])
    sim = Simulation(w, [LaneSpec("paged", kw["block_size"], prefix_caching=kw["prefix"])],
                     CacheConfig(capacity_tokens=c["num_blocks"] * kw["block_size"]), eng)
    got = sim.run()[0]
    want = (ref["steps"][-1]["step"], sum(len(y["preempted"]) for y in ref["steps"]), len(w))
    assert (got["steps"], got["preemptions"], got["finished"]) == want, (kw, got, want)


def main() -> int:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 600.0
    warnings.simplefilter("ignore")  # .example() outside a test: hypothesis warns
    gen, srv, n, end = streams(**WIDE), VllmServer(), 0, time.monotonic() + seconds
    try:
        while time.monotonic() < end:
            check(srv, *gen.example())
            n += 1
            if n % 100 == 0:
                print(f"{n} streams equal", flush=True)
    except AssertionError as exc:
        print(f"after {n} equal streams, one differs: {exc}"[:4000])
        return 1
    finally:
        srv.close()
    print(f"{n} streams in {seconds:.0f} s: kvviz equals vLLM {srv.version} on every one")
    return 0


if __name__ == "__main__":
    sys.exit(main())
