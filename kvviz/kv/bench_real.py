"""Real mode's benchmark: decode steps per second of RealKV over the engine's own pool."""
from __future__ import annotations

import math
import time

import numpy as np
import torch

from kvviz.core.config import model_preset
from kvviz.kv.attention import get_backend
from kvviz.kv.bench import environment


def bench_real(model: str = "tiny-cpu", seqs: int = 64, context: int = 300, steps: int = 100,
               duration: float | None = None, device: str = "cpu", allocator: str = "paged",
               block_size: int = 16, backend: str = "auto", dtype: str | None = None,
               seed: int = 0) -> dict:
    """Decode steps per second of RealKV over a batch of `seqs` running sequences.

    Lengths start uniform in [context/2, 3*context/2]; a sequence that reaches 2*context is
    released and replaced (its prefill is written, untimed), so the batch stays full.
    """
    from kvviz.core.config import LaneSpec
    from kvviz.engine.kvpool import KVPool
    from kvviz.kv.real import RealKV

    if seqs < 1 or context < 2:
        raise ValueError(f"seqs/context: need seqs >= 1 and context >= 2, got {seqs}, {context}")
    shape = model_preset(model)
    limit = 2 * context
    rng = np.random.default_rng(seed)
    if allocator == "paged":
        blocks = seqs * (math.ceil(limit / block_size) + 1)
        alloc = KVPool(LaneSpec("paged", block_size), blocks * block_size)
    elif allocator == "contiguous":
        alloc = KVPool(LaneSpec("contiguous", 1), seqs * (limit + 1), label="contiguous:first-fit")
    else:
        raise ValueError(f"allocator: 'paged' or 'contiguous', got {allocator!r}")
    kv = RealKV(alloc, shape, device=device, seed=seed, dtype=dtype, backend=backend)
    dev = torch.device(device)
    ids = np.arange(seqs, dtype=np.int64)
    lens = rng.integers(context // 2, context * 3 // 2, seqs).astype(np.int64)
    next_id = seqs

    def admit(slot_ids: np.ndarray, new_lens: np.ndarray) -> None:
        for s, n in zip(slot_ids, new_lens):
            reserve = limit if allocator == "contiguous" else None
            if not alloc.admit(int(s), int(n), reserve).ok:
                raise RuntimeError("bench_real: allocator refused a sequence; capacity too small")
        kv.on_admit(slot_ids.tolist(), new_lens.tolist())

    admit(ids, lens)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    done, replaced, prefill_s = 0, 0, 0.0
    sync()
    t0 = time.perf_counter()
    while (done < steps) if duration is None else (time.perf_counter() - t0 < duration):
        if not alloc.append_batch(ids).all():
            raise RuntimeError("bench_real: append failed; capacity too small")
        lens += 1
        kv.on_decode(ids, lens)
        done += 1
        full = np.nonzero(lens >= limit)[0]
        if full.size:
            t = time.perf_counter()
            for i in full:
                alloc.release(int(ids[i]))
                ids[i], next_id = next_id, next_id + 1
            lens[full] = rng.integers(context // 2, context * 3 // 2, full.size)
            admit(ids[full], lens[full])
            sync()
            prefill_s += time.perf_counter() - t
            replaced += full.size
    sync()
    elapsed = time.perf_counter() - t0 - prefill_s
    out = {
        "bench": "real", "model": model, "seqs": seqs, "context": context, "device": device,
        "allocator": alloc.label, "backend": get_backend(backend, dev).name,
        "dtype": str(kv.dtype).removeprefix("torch."), "steps": done,
        "decode_seconds": round(elapsed, 3), "steps_per_s": round(done / elapsed, 2),
        "tokens_per_s": round(done * seqs / elapsed, 1), "replaced_sequences": replaced,
        "pool_bytes": kv.pool_bytes,
        "kv_gbps": round(kv.kv_bytes_read_total / elapsed / 1e9, 3), **environment(dev),
    }
    if dev.type == "cuda":
        out["torch_max_allocated"] = torch.cuda.max_memory_allocated(dev)
    return out
