"""Floors for the vLLM benchmark's prefix-sharing stream: how fast bare Python goes on it.

    python benchmarks/bench_prefix_floor.py [--repeats 5] [--json]

The stream of `bench_engine.py vllm`'s "prefix 10/s" case (1,000 sharegpt-like requests at
10 req/s, prefix_share 0.8, seed 0; 2,048 blocks of 16, 256 seqs, 8,192 batched tokens).
kvviz's engine and three loops that do less than the scheduler must, timed in interleaved
rounds (medians):
  kvviz        `kvviz simulate`'s engine, paged:16:prefix (as `bench_engine.py vllm` runs it).
  plain loop   bench_engine.py's plain-Python loop over this stream: one token append per
               running request per step, a deque free list, no arrivals (all at once), no
               prefix cache, no events, no shares.
  block floor  the per-block work alone, as many times as kvviz registers keys on this stream
               (49,000, counted by `kvviz simulate`): one chained tuple hash, one dict entry
               stored, the block's old one evicted, one LRU touch.
  sketch walk  prefix_sketch.py: the steps walked with a prefix cache in pure Python, what a
               prefix-aware walk would keep and no more (not exact: no chunked prefill, no
               events, no shares, nothing written back); its totals are printed beside kvviz's.
vLLM's own loop on this stream is timed by `bench_engine.py vllm`; see docs/BENCHMARKS.md for
what the floors say about a 100x target there.
"""
from __future__ import annotations

import statistics

import harness
from bench_engine import kvviz_run, plain_python_loop
from prefix_sketch import arrival_steps, walk

from kvviz.core.config import EngineConfig, WorkloadConfig
from kvviz.core.workload import generate

BLOCKS, BS, KEYS = 2048, 16, 49_000


def block_floor(n: int = KEYS, blocks: int = BLOCKS) -> int:
    """n blocks filled: each key chained from the one before, stored in a dict, the block's
    previous key evicted from it, the block touched in an insertion-ordered LRU."""
    cache: dict = {}
    key_of: list = [None] * blocks
    lru: dict = {}
    prev = 0
    for i in range(n):
        prev = hash((prev, (), 7, i * BS))
        key = (prev, i * BS)
        b = i % blocks
        old = key_of[b]
        if old is not None:
            del cache[old]
        key_of[b] = key
        cache[key] = b
        lru[b] = None
        lru.pop(b)
    return len(cache)


def main() -> None:
    args = harness.parser(__doc__).parse_args()
    w = generate(WorkloadConfig("sharegpt-like", num_requests=100 if args.quick else 1000,
                                rate=10.0, prefix_share=0.8, seed=0))
    keys = 4_900 if args.quick else KEYS
    arrive = arrival_steps(w, EngineConfig().step_ms)
    got: dict = {}
    rounds = harness.interleaved({
        "kvviz": lambda: got.__setitem__("kvviz", kvviz_run(w, ["paged:16:prefix"],
                                                            BLOCKS * BS, 256, 8192)[0]),
        "plain_loop": lambda: plain_python_loop(w, 256, BS, BLOCKS * BS),
        "block_floor": lambda: block_floor(keys),
        "sketch_walk": lambda: got.__setitem__("sketch", walk(w, arrive, BLOCKS, BS)),
    }, args.repeats)
    med = {k: statistics.median(v) for k, v in rounds.items()}
    kv, sk = got["kvviz"], got["sketch"]
    totals = {"kvviz": {k: kv[k] for k in ("steps", "preemptions", "prefix_hit_rate")},
              "sketch": {k: sk[k] for k in ("steps", "preemptions", "hit_rate")}}
    text = {"kvviz": f"({kv['steps']} steps, {kv['preemptions']} preemptions, hit rate "
                     f"{kv['prefix_hit_rate']:.3f})",
            "plain_loop": f"({len(w)} requests, {BLOCKS} blocks)",
            "block_floor": f"({keys} keys)",
            "sketch_walk": f"({sk['steps']} steps, {sk['preemptions']} preemptions, hit rate "
                           f"{sk['hit_rate']:.3f}; kvviz / sketch "
                           f"{med['kvviz'] / med['sketch_walk']:.1f}x)"}
    for case, sec in med.items():
        harness.emit(args, {"case": case, "seconds": sec, **({"keys": keys} if case ==
                                                              "block_floor" else {}),
                            **({"totals": totals} if case == "sketch_walk" else {})},
                     f"{case:<12} {sec * 1e3:7.1f} ms  {text[case]}")


if __name__ == "__main__":
    main()
