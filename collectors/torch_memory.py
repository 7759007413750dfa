"""What this process holds: torch's CUDA allocator counters, the KV pools, the RSS.

torch is imported only when asked for (real mode); sim mode records the RSS alone.
"""
from __future__ import annotations

import functools
import os
from collections.abc import Sequence

import psutil


def cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def pool_bytes(executors: Sequence[object]) -> int:
    """Sum of the KV pools' bytes over the lanes' executors (0 in sim mode)."""
    return int(sum(getattr(kv, "pool_bytes", 0) or 0 for kv in executors if kv is not None))


@functools.lru_cache(maxsize=1)
def _process(pid: int) -> psutil.Process:
    return psutil.Process(pid)  # made once per process, not per sample: construction reads /proc


def _rss() -> int:
    return int(_process(os.getpid()).memory_info().rss)


def sample(device: str, executors: Sequence[object] = ()) -> dict:
    rec: dict = {"process_rss_bytes": _rss(),
                 "kv_pool_bytes": pool_bytes(executors)}
    if device.startswith("cuda"):
        import torch

        rec.update(torch_allocated_bytes=int(torch.cuda.memory_allocated()),
                   torch_reserved_bytes=int(torch.cuda.memory_reserved()),
                   torch_max_allocated_bytes=int(torch.cuda.max_memory_allocated()))
    return rec
