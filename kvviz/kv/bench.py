"""Benchmarks: paged vs contiguous decode attention over the same K/V, and real-mode steps.

Timing: warm-up runs, then `repeats` timed runs of each path, interleaved (paged, contiguous,
paged, ...) so that drift on a shared machine hits both alike. A sweep over block sizes can
repeat the whole sweep `rounds` times, so that a burst of load on a shared machine hits one
round of a block size, not all its runs. Reported: the median, the 10th and 90th percentiles
and the spread (p90 - p10) / median of every run pooled, the number of runs and the torch
thread count; `noisy` is set when the spread is over NOISY_SPREAD. CUDA runs are timed with
CUDA events, CPU runs with perf_counter. Index checks run once before timing
(check_values=False inside the timed loop, for both paths).
"""
from __future__ import annotations

import math
import platform
import statistics
import time
from dataclasses import asdict, dataclass, replace

import torch

from kvviz.kv.attention import contiguous_decode_attention, get_backend, paged_decode_attention
from kvviz.kv.cache import TORCH_DTYPES

SWEEP_BLOCK_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
NOISY_SPREAD = 0.25  # (p90 - p10) / median above this: the timing is noise-dominated


@dataclass(frozen=True)
class AttentionBench:
    device: str = "cpu"
    batch: int = 16
    context: int = 1024
    heads: int = 8
    kv_heads: int = 8
    head_dim: int = 128
    block_size: int = 16
    dtype: str = "float32"
    backend: str = "auto"  # paged path
    contiguous_backend: str = "torch"  # the baseline: SDPA over contiguous K/V
    repeats: int = 20
    warmup: int = 3
    seed: int = 0

    def __post_init__(self) -> None:
        for f in ("batch", "context", "heads", "kv_heads", "head_dim", "block_size", "repeats"):
            if getattr(self, f) < 1:
                raise ValueError(f"{f}: must be >= 1, got {getattr(self, f)}")
        if self.heads % self.kv_heads:
            raise ValueError(f"heads: {self.heads} is not a multiple of kv_heads {self.kv_heads}")
        if self.dtype not in TORCH_DTYPES:
            raise ValueError(f"dtype: choose one of {sorted(TORCH_DTYPES)}, got {self.dtype!r}")


def _timer(device: torch.device):
    """A function that times one call in milliseconds."""
    if device.type == "cuda":
        def run_cuda(fn) -> float:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end)
        return run_cuda

    def run_cpu(fn) -> float:
        t = time.perf_counter()
        fn()
        return (time.perf_counter() - t) * 1e3
    return run_cpu


def time_runs(fns: dict, device: torch.device | str, repeats: int, warmup: int = 3) -> dict:
    """{name: [ms, ...]}: `warmup` untimed rounds, then `repeats` rounds, interleaved."""
    timer = _timer(torch.device(device))
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    runs: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            runs[name].append(timer(fn))
    return runs


def cpu_model() -> str:
    """The CPU's model name as the kernel reports it (/proc/cpuinfo), else platform's guess."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def environment(device: torch.device) -> dict:
    """Where a figure was measured: the CPU's model name always, the GPU's on CUDA."""
    env = {"torch": torch.__version__, "threads": torch.get_num_threads(),
           "machine": platform.machine(), "cpu": cpu_model()}
    env["device_name"] = (torch.cuda.get_device_name(device) if device.type == "cuda"
                          else env["cpu"])
    return env


def attention_inputs(cfg: AttentionBench) -> dict:
    """Same K/V content laid out contiguous (sequence i at rows i*context..) and paged
    (blocks handed out in random order from a pool with spares). Keys follow the argument
    names of paged_/contiguous_decode_attention."""
    dev = torch.device(cfg.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("device: cuda requested but torch sees no CUDA device")
    dt = TORCH_DTYPES[cfg.dtype]
    g = torch.Generator(device=dev).manual_seed(cfg.seed)
    b, n, kvh, d, bs = cfg.batch, cfg.context, cfg.kv_heads, cfg.head_dim, cfg.block_size
    k_pool = torch.randn(b * n, kvh, d, generator=g, device=dev, dtype=dt)
    v_pool = torch.randn(b * n, kvh, d, generator=g, device=dev, dtype=dt)
    q = torch.randn(b, cfg.heads, d, generator=g, device=dev, dtype=dt)
    nblk = math.ceil(n / bs)
    num_blocks = b * nblk + b
    perm = torch.randperm(num_blocks, generator=g, device=dev)[: b * nblk]
    tables = perm.view(b, nblk).to(torch.int32)
    k_cache = torch.zeros(num_blocks, bs, kvh, d, device=dev, dtype=dt)
    v_cache = torch.zeros_like(k_cache)
    pos = torch.arange(n, device=dev)
    slots = (tables.long()[:, pos // bs] * bs + pos % bs).reshape(-1)  # [b*n], row order
    k_cache.view(-1, kvh, d).index_copy_(0, slots, k_pool)
    v_cache.view(-1, kvh, d).index_copy_(0, slots, v_pool)
    return {"q": q, "k_cache": k_cache, "v_cache": v_cache, "block_tables": tables,
            "k_pool": k_pool, "v_pool": v_pool,
            "starts": torch.arange(b, device=dev, dtype=torch.int64) * n,
            "context_lens": torch.full((b,), n, dtype=torch.int32, device=dev)}


def percentile(xs: list[float], q: float) -> float:
    """The q-quantile (0..1) of xs, linear between order statistics."""
    v = sorted(xs)
    pos = q * (len(v) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def spread_stats(runs: list[float]) -> dict:
    """Median, p10, p90 and the relative spread (p90 - p10) / median of runs (ms)."""
    med = statistics.median(runs)
    p10, p90 = percentile(runs, 0.10), percentile(runs, 0.90)
    return {"ms": med, "p10": p10, "p90": p90, "spread": (p90 - p10) / med if med > 0 else 0.0}


def _timed(cfg: AttentionBench) -> tuple[dict, dict, float, int]:
    """({paged: [ms], contiguous: [ms][, same_kernel: [ms]]}, backends, max |paged -
    contiguous|, K/V bytes). same_kernel: the contiguous layout through the paged path's
    backend, timed when the two backends differ, so that paged / same_kernel is the cost of
    the indirection alone (the same instructions, only the table lookup and the block order
    differ)."""
    dev = torch.device(cfg.device)
    x = attention_inputs(cfg)

    def paged(check=False):
        return paged_decode_attention(x["q"], x["k_cache"], x["v_cache"], x["block_tables"],
                                      x["context_lens"], backend=cfg.backend, check_values=check)

    def contiguous(check=False):
        return contiguous_decode_attention(x["q"], x["k_pool"], x["v_pool"], x["starts"],
                                           x["context_lens"], backend=cfg.contiguous_backend,
                                           check_values=check)

    def same_kernel(check=False):
        return contiguous_decode_attention(x["q"], x["k_pool"], x["v_pool"], x["starts"],
                                           x["context_lens"], backend=cfg.backend,
                                           check_values=check)

    backends = {"backend": get_backend(cfg.backend, dev).name,
                "contiguous_backend": get_backend(cfg.contiguous_backend, dev).name}
    fns = {"paged": paged, "contiguous": contiguous}
    if backends["backend"] != backends["contiguous_backend"]:
        fns["same_kernel"] = same_kernel
    diff = max((paged(True).float() - fn(True).float()).abs().max().item()
               for name, fn in fns.items() if name != "paged")
    runs = time_runs(fns, dev, cfg.repeats, cfg.warmup)
    kv_bytes = 2 * x["k_pool"].numel() * x["k_pool"].element_size()
    return runs, backends, diff, kv_bytes


def _result(cfg: AttentionBench, runs: dict, backends: dict, diff: float, kv_bytes: int,
            rounds: int = 1) -> dict:
    p, c = spread_stats(runs["paged"]), spread_stats(runs["contiguous"])
    return {
        "bench": "attention", **asdict(cfg), **backends,
        "rounds": rounds, "runs": len(runs["paged"]),
        "paged_ms": round(p["ms"], 4), "contiguous_ms": round(c["ms"], 4),
        "ratio": round(p["ms"] / c["ms"], 4),
        # GB/s with 4 significant digits: a slow CPU run reads ~0.05 GB/s, not "0.0"
        "gbps": float(f"{kv_bytes / (p['ms'] * 1e-3) / 1e9:.4g}"),
        "contiguous_gbps": float(f"{kv_bytes / (c['ms'] * 1e-3) / 1e9:.4g}"),
        "paged_ms_min": round(min(runs["paged"]), 4),
        "contiguous_ms_min": round(min(runs["contiguous"]), 4),
        "paged_ms_p10": round(p["p10"], 4), "paged_ms_p90": round(p["p90"], 4),
        "contiguous_ms_p10": round(c["p10"], 4), "contiguous_ms_p90": round(c["p90"], 4),
        "paged_spread": round(p["spread"], 4), "contiguous_spread": round(c["spread"], 4),
        "noisy": max(p["spread"], c["spread"]) > NOISY_SPREAD,
        "kv_bytes": kv_bytes, "max_abs_diff": diff, **environment(torch.device(cfg.device)),
        **_same_kernel(runs, p["ms"]),
    }


def _same_kernel(runs: dict, paged_ms: float) -> dict:
    """The contiguous layout through the paged backend, when it was timed."""
    if "same_kernel" not in runs:
        return {}
    s = spread_stats(runs["same_kernel"])
    return {"same_kernel_ms": round(s["ms"], 4), "same_kernel_ms_p10": round(s["p10"], 4),
            "same_kernel_ms_p90": round(s["p90"], 4), "same_kernel_spread": round(s["spread"], 4),
            "indirection_ratio": round(paged_ms / s["ms"], 4)}


def bench_attention(cfg: AttentionBench) -> dict:
    """Median (and spread) of the paged and the contiguous path over the same K/V."""
    return _result(cfg, *_timed(cfg))


def sweep_block_sizes(cfg: AttentionBench, sizes=SWEEP_BLOCK_SIZES, rounds: int = 1):
    """One result per block size (a generator). With rounds > 1 the whole sweep runs `rounds`
    times and each block size's runs are pooled; results come after the last round."""
    if rounds < 1:
        raise ValueError(f"rounds: must be >= 1, got {rounds}")
    if rounds == 1:
        for bs in sizes:
            yield bench_attention(replace(cfg, block_size=bs))
        return
    pooled: dict[int, list] = {}
    for _ in range(rounds):
        for bs in sizes:
            runs, backends, diff, kv_bytes = _timed(replace(cfg, block_size=bs))
            if bs not in pooled:
                pooled[bs] = [{k: [] for k in runs}, backends, diff, kv_bytes]
            for k in runs:
                pooled[bs][0][k] += runs[k]
            pooled[bs][2] = max(pooled[bs][2], diff)
    for bs in sizes:
        yield _result(replace(cfg, block_size=bs), *pooled[bs], rounds=rounds)

