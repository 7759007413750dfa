"""Block map encode + write time and bytes per stored map.

Maps: an engine map (sim run of a paged lane, block 16), a churned stress map (random
admit/release rounds leave ~74k runs in 1M blocks), a lockstep map (a full pool whose 4,096
sequences grew one block each in turn, so every block is its own run: rle-zlib-2's per-plane
mode), the same pool with its blocks in random order, plus the all-free map. "write" is one
RunWriter.add_sample with the map plus commit (WAL, synchronous=NORMAL).

    python benchmarks/bench_store.py [--blocks 1048576] [--repeats 20] [--json]

Target: encode + write <= 10 ms for 1M blocks.
"""
from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path

import harness
import numpy as np

from kvviz.alloc import PagedAllocator
from kvviz.blockmap import BlockMap, empty_blockmap
from kvviz.config import CacheConfig, EngineConfig, LaneSpec, WorkloadConfig
from kvviz.engine import Simulation
from kvviz.store.mapcodec import encode
from kvviz.store.writer import RunWriter
from kvviz.workload import generate  # noqa: E402


def engine_map(blocks: int) -> BlockMap:
    w = generate(WorkloadConfig(num_requests=40000, seed=0))
    sim = Simulation(w, [LaneSpec.parse("paged:16")], CacheConfig(capacity_tokens=blocks * 16),
                     EngineConfig(max_num_seqs=4096, max_batched_tokens=1 << 20))
    for _ in range(600):
        sim.step()
    return sim.lanes[0].snapshot()


def churned_map(blocks: int) -> BlockMap:
    rng = np.random.default_rng(0)
    a = PagedAllocator(blocks, 16)
    sid, live = 0, []
    for _ in range(6):
        while a.admit(sid, int(rng.lognormal(6, 1)) + 1).ok:
            live.append(sid)
            sid += 1
        rng.shuffle(live)
        a.release_many(np.array(live[: len(live) // 2]))
        live = live[len(live) // 2:]
    return a.snapshot()


def lockstep_map(blocks: int, seqs: int = 4096, bs: int = 16) -> BlockMap:
    rng = np.random.default_rng(0)
    owner = (np.arange(blocks) % seqs).astype(np.int32)
    filled = np.full(blocks, bs, np.int32)
    filled[-seqs:] = rng.integers(1, bs + 1, seqs)
    return BlockMap(owner, filled, np.full(blocks, bs, np.int32), np.ones(blocks, np.int16),
                    np.zeros(blocks, bool), bs, 1, "paged:16", False)


def random_order_map(blocks: int) -> BlockMap:
    """The lockstep pool with its blocks shuffled: a long-running busy pool, whose free list
    hands out blocks in no particular order, looks like this (every block its own run)."""
    ls = lockstep_map(blocks)
    perm = np.random.default_rng(1).permutation(blocks)
    return BlockMap(ls.owner[perm], ls.filled[perm], ls.allocated, ls.refcount, ls.cached,
                    ls.block_size, 1, ls.label, False)


def bench(a, name: str, bm: BlockMap, repeats: int, tmp: Path) -> None:
    enc_t = []
    for _ in range(repeats):
        t = time.perf_counter()
        e = encode(bm)
        enc_t.append(time.perf_counter() - t)
    w = RunWriter(tmp / f"{name}.db", {}, blockmap_budget_bytes=2**40)
    wr_t = []
    for i in range(repeats):
        t = time.perf_counter()
        w.add_sample(float(i), i, "lane", {}, bm)
        w.commit()
        wr_t.append(time.perf_counter() - t)
    w.close()
    raw = sum(getattr(bm, k).nbytes for k in ("owner", "filled", "allocated", "refcount",
                                               "cached"))
    mode = json.loads(e.layout)["mode"]
    harness.emit(a, {"bench": "store", "map": name, "blocks": bm.num_blocks, "runs": e.runs,
                     "layout": mode, "encode_ms": 1e3 * statistics.median(enc_t),
                     "encode_write_ms": 1e3 * statistics.median(wr_t), "bytes": e.nbytes,
                     "raw_ratio": raw / e.nbytes},
                 f"{name:>8}: {bm.num_blocks} blocks, {e.runs} runs ({mode}), "
                 f"used {(bm.owner >= 0).mean():.0%}"
                 f" | encode {1e3 * statistics.median(enc_t):.2f} ms, encode+write+commit "
                 f"{1e3 * statistics.median(wr_t):.2f} ms (median of {repeats}) | {e.nbytes} "
                 f"bytes stored ({e.nbytes / bm.num_blocks:.3f} B/block, raw "
                 f"{raw / e.nbytes:.0f}x larger)")


def main() -> None:
    p = harness.parser(__doc__, repeats=20)
    p.add_argument("--blocks", type=int, default=1 << 20)
    a = p.parse_args()
    if a.quick:
        a.blocks, a.repeats = 1 << 14, 3
    with tempfile.TemporaryDirectory() as d:
        for name, bm in (("free", empty_blockmap(a.blocks, 16)), ("engine", engine_map(a.blocks)),
                         ("churned", churned_map(a.blocks)),
                         ("lockstep", lockstep_map(a.blocks)),
                         ("random", random_order_map(a.blocks))):
            bench(a, name, bm, a.repeats, Path(d))


if __name__ == "__main__":
    main()
