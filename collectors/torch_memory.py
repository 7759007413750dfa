"""What this process holds: torch's CUDA allocator counters, the KV pools, the RSS.

torch is imported only when asked for (real mode); sim mode records the RSS alone. The RSS
comes from psutil (a requirement), or from /proc/self/statm on a Linux machine without it (the
GPU check's bare image: benchmarks/gpu_check.sh).
"""
from __future__ import annotations

import functools
import os
from collections.abc import Sequence

try:
    import psutil
except ImportError:  # a bare machine: read /proc (Linux) instead
    psutil = None


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
def _process(pid: int):
    return psutil.Process(pid)  # made once per process, not per sample: construction reads /proc


def _rss() -> int:
    if psutil is not None:
        return int(_process(os.getpid()).memory_info().rss)
    return _statm_rss()


def _statm_rss() -> int:
    """The RSS from /proc/self/statm (its second field: resident pages)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError) as exc:
        raise RuntimeError("the process's RSS: psutil is not installed and /proc/self/statm "
                           f"cannot be read ({exc}); pip install psutil") from None


def sample(device: str, executors: Sequence[object] = ()) -> dict:
    rec: dict = {"process_rss_bytes": _rss(),
                 "kv_pool_bytes": pool_bytes(executors)}
    if device.startswith("cuda"):
        import torch

        rec.update(torch_allocated_bytes=int(torch.cuda.memory_allocated()),
                   torch_reserved_bytes=int(torch.cuda.memory_reserved()),
                   torch_max_allocated_bytes=int(torch.cuda.max_memory_allocated()))
    return rec
