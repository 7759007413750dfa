"""Floors for the vLLM benchmark's prefix-sharing stream: how fast bare Python goes on it.

    python benchmarks/bench_prefix_floor.py [--repeats 5] [--json]

The stream of `bench_engine.py vllm`'s "prefix 10/s" case (1,000 sharegpt-like requests at
10 req/s, prefix_share 0.8, seed 0; 2,048 blocks of 16, 256 seqs). Two loops that do less
than the scheduler must, timed (medians):
  plain loop   bench_engine.py's plain-Python loop over this stream: one token append per
               running request per step, a deque free list, no arrivals (all at once), no
               prefix cache, no events, no shares.
  block floor  the per-block work alone, as many times as kvviz registers keys on this stream
               (49,000, counted by `kvviz simulate`): one chained tuple hash, one dict entry
               stored, the block's old one evicted, one LRU touch.
kvviz's engine itself is timed on the same stream by `bench_engine.py vllm`; see
docs/BENCHMARKS.md for what the floors say about a 100x target there.
"""
from __future__ import annotations

import harness
from bench_engine import plain_python_loop

from kvviz.core.config import WorkloadConfig
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
    plain = harness.median_s(lambda: plain_python_loop(w, 256, BS, BLOCKS * BS), args.repeats)
    floor = harness.median_s(lambda: block_floor(keys), args.repeats)
    harness.emit(args, {"case": "plain_loop", "seconds": plain},
                 f"plain loop   {plain * 1e3:6.1f} ms  ({len(w)} requests, {BLOCKS} blocks)")
    harness.emit(args, {"case": "block_floor", "seconds": floor, "keys": keys},
                 f"block floor  {floor * 1e3:6.1f} ms  ({keys} keys)")


if __name__ == "__main__":
    main()
