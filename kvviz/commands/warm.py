"""`kvviz warm`: compile kvviz's numba code once, ahead, so no user waits for the JIT.

The scheduling rule (kvviz/engine/rule) is compiled for every kind of lane by running a tiny
workload through it; the CPU decode-attention kernel (kvviz/kv/attention_numba.py) by one
small call when torch is installed. Both are cached on disk (the rule under its own
directory, see kvviz/engine/rule/__init__.py), so later processes load them in a fraction of
a second. scripts/dashboard.sh and scripts/test.sh run it once after installing.
"""
from __future__ import annotations

import argparse
import importlib.util
import sys
import time

HELP = "compile kvviz's numba code (the scheduling rule, the CPU attention kernel) ahead"

# One lane of every kind the rule compiles a path for.
LANES = ("paged:16", "paged:16:prefix", "contiguous:first-fit:max", "contiguous:best-fit:pow2",
         "contiguous:buddy:exact")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quiet", action="store_true", help="print nothing but errors")


def run(a: argparse.Namespace) -> int:
    say = (lambda _m: None) if a.quiet else (lambda m: print(m, file=sys.stderr, flush=True))
    from kvviz.engine.rule import cache_dir

    say(f"kvviz warm: the scheduling rule: loading it from {cache_dir()}, or compiling it "
        "there (about a minute, once) ...")
    t0 = time.perf_counter()
    warm_rule()
    say(f"kvviz warm: the scheduling rule is ready ({time.perf_counter() - t0:.1f} s)")
    if importlib.util.find_spec("torch") is None:
        say("kvviz warm: torch is not installed: the CPU attention kernel is skipped")
        return 0
    say("kvviz warm: the CPU decode-attention kernel: loading or compiling it ...")
    t0 = time.perf_counter()
    warm_kernel()
    say(f"kvviz warm: the CPU decode-attention kernel is ready ({time.perf_counter() - t0:.1f} s)")
    return 0


def warm_rule() -> None:
    """A few requests through every kind of lane, prefix hits and preemptions included, the
    twin's logged run (`kvviz whatif`'s baseline), and each verb of a pool driven directly."""
    from kvviz.core.config import CacheConfig, EngineConfig, LaneSpec, WorkloadConfig, model_for
    from kvviz.core.workload import generate
    from kvviz.engine import Simulation

    w = generate(WorkloadConfig("alpaca-like", num_requests=40, rate=float("inf"),
                                max_seq_len=256, prefix_share=0.5, prefix_tokens=32, seed=0))
    cache = CacheConfig(1024, model_for(None, real_on_cpu=False))
    sim = Simulation(w, [LaneSpec.parse(s) for s in LANES], cache,
                     EngineConfig(max_num_seqs=16, max_batched_tokens=256, max_seq_len=256))
    sim.run()
    from kvviz.twin.runner import Stream, run_config
    from kvviz.twin.settings import NodeSettings

    run_config(Stream(w, cache.model, 20.0, 256), NodeSettings(16, 65, 16, 256), record=True)
    from kvviz.engine.kvpool import KVPool

    for text in LANES:  # the verbs of a pool driven directly (Learn, real mode's benchmark)
        pool = KVPool(LaneSpec.parse(text), 1024)
        pool.admit(0, 40)
        pool.append_batch([0], 20)
        pool.snapshot()  # a paged map's owners: view.first_holders
        pool.check(8)
        pool.release(0)


def warm_kernel() -> None:
    import torch

    from kvviz.kv.attention import paged_decode_attention

    q = torch.zeros(2, 2, 8)
    k = torch.zeros(4, 4, 2, 8)
    tables = torch.tensor([[0, 1], [2, 3]], dtype=torch.int32)
    paged_decode_attention(q, k, k.clone(), tables, torch.tensor([5, 3], dtype=torch.int32),
                           backend="numba")
