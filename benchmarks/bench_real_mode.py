"""Real mode decode step rate: RealKV.on_decode over a full running batch.

    python benchmarks/bench_real_mode.py [--seqs 64 --context 300 --steps 200] [--device cpu]
        [--allocator paged|contiguous|fake] [--duration 60] [--threads N]

Uses the project's allocators (kvviz.alloc) through kvviz.kv.bench.bench_real. `--allocator
fake` (or an import failure of kvviz.alloc) drives RealKV with a minimal paged stand-in
defined here, so the script also runs on a machine whose tree lacks the allocators.
Prints one JSON line; on CUDA it adds torch's peak allocation and NVML's used memory.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

import torch


class FakePaged:
    """Paged stand-in: a shuffled free list, block tables, nothing else."""

    contiguous = False
    label = "fake-paged"

    def __init__(self, num_blocks: int, block_size: int) -> None:
        from kvviz.alloc.base import Usage

        self._usage = Usage(num_blocks * block_size, 0, 0, 0, 0)
        self.block_size = block_size
        self._free = list(np.random.default_rng(0).permutation(num_blocks))
        self._tables: dict[int, list[int]] = {}
        self._lens: dict[int, int] = {}

    def usage(self):
        return self._usage

    def admit(self, seq: int, n: int) -> None:
        self._tables[seq], self._lens[seq] = [], 0
        self.grow(seq, n)

    def grow(self, seq: int, n: int = 1) -> None:
        self._lens[seq] += n
        while len(self._tables[seq]) * self.block_size < self._lens[seq]:
            self._tables[seq].append(int(self._free.pop()))

    def release(self, seq: int) -> None:
        self._free.extend(self._tables.pop(seq))
        del self._lens[seq]

    def seq_allocated_tokens(self, seq_ids) -> np.ndarray:
        return np.asarray([len(self._tables[int(s)]) * self.block_size for s in seq_ids])

    def block_tables(self, seq_ids) -> np.ndarray:
        width = max(len(self._tables[int(s)]) for s in seq_ids)
        out = np.zeros((len(seq_ids), width), np.int32)
        for i, s in enumerate(seq_ids):
            out[i, : len(self._tables[int(s)])] = self._tables[int(s)]
        return out


def run_fake(args) -> dict:
    from kvviz.config import model_preset
    from kvviz.kv.real import RealKV

    limit, bs = 2 * args.context, args.block_size
    alloc = FakePaged(args.seqs * (math.ceil(limit / bs) + 1), bs)
    kv = RealKV(alloc, model_preset(args.model), device=args.device, backend=args.backend)
    rng = np.random.default_rng(0)
    ids = np.arange(args.seqs)
    lens = rng.integers(args.context // 2, args.context * 3 // 2, args.seqs)
    for s, n in zip(ids, lens):
        alloc.admit(int(s), int(n))
    kv.on_admit(ids.tolist(), lens.tolist())
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    sync()
    t0, steps, next_id = time.perf_counter(), 0, args.seqs
    while (steps < args.steps) if args.duration is None else (
            time.perf_counter() - t0 < args.duration):
        for s in ids:
            alloc.grow(int(s))
        lens += 1
        kv.on_decode(ids, lens)
        steps += 1
        for i in np.nonzero(lens >= limit)[0]:  # replace finished sequences (prefill timed too)
            alloc.release(int(ids[i]))
            ids[i], next_id, lens[i] = next_id, next_id + 1, args.context // 2
            alloc.admit(int(ids[i]), int(lens[i]))
            kv.on_admit([int(ids[i])], [int(lens[i])])
    sync()
    dt = time.perf_counter() - t0
    return {"bench": "real", "allocator": alloc.label, "model": args.model, "seqs": args.seqs,
            "context": args.context, "device": args.device, "steps": steps,
            "decode_seconds": round(dt, 3), "steps_per_s": round(steps / dt, 2),
            "pool_bytes": kv.pool_bytes, "threads": torch.get_num_threads()}


def nvml_used() -> dict:
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        mem = pynvml.nvmlDeviceGetMemoryInfo(h)
        return {"nvml_used_bytes": int(mem.used), "nvml_total_bytes": int(mem.total)}
    except Exception as exc:  # noqa: BLE001 - no NVML here: say so in the output
        return {"nvml_error": repr(exc)[:200]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="tiny-cpu")
    p.add_argument("--seqs", type=int, default=64)
    p.add_argument("--context", type=int, default=300)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--duration", type=float, default=None)
    p.add_argument("--device", default="cpu")
    p.add_argument("--allocator", choices=("paged", "contiguous", "fake"), default="paged")
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--backend", default="auto")
    p.add_argument("--threads", type=int, default=None)
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    result = None
    if args.allocator != "fake":
        try:
            from kvviz.kv.bench import bench_real
        except ImportError as exc:
            print(json.dumps({"note": f"kvviz.alloc unavailable ({exc}); using the fake"}))
        else:
            result = bench_real(args.model, args.seqs, args.context, args.steps, args.duration,
                                args.device, args.allocator, args.block_size, args.backend)
    if result is None:
        result = run_fake(args)
    if args.device == "cuda":
        result["torch_max_allocated"] = torch.cuda.max_memory_allocated()
        result.update(nvml_used())
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
