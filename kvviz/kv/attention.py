"""Decode attention over a KV cache: one query token per sequence, backends chosen by name.

    paged_decode_attention       K/V found through block tables   (PagedKVCache layout)
    contiguous_decode_attention  K/V in one (start, length) range  (ContiguousKVCache layout)

Both validate every argument here, before any backend launches anything, and raise
ValueError naming the argument. Backends live one per file behind `DecodeBackend`.
"""
from __future__ import annotations

import importlib.util
import math

import numpy as np
import torch

from kvviz.kv.attention_backend import DecodeBackend, DecodeMeta

FLOAT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
BACKENDS = ("torch", "numba", "triton")


_loaded: dict[str, DecodeBackend] = {}


def get_backend(name: str, device: torch.device | str) -> DecodeBackend:
    """The backend called `name` ("auto": numba on CPU, triton on CUDA when importable,
    else torch)."""
    device = torch.device(device)
    if name == "auto":
        name = "torch"
        if device.type == "cpu" and _importable("numba"):
            return get_backend("numba", device)
        if device.type == "cuda" and _importable("triton"):
            try:
                return get_backend("triton", device)
            except ValueError:  # triton present but broken: auto falls back to torch
                pass
    if name not in BACKENDS:
        raise ValueError(f"backend: unknown {name!r}; choose one of {['auto', *BACKENDS]}")
    if name not in _loaded:
        try:
            _loaded[name] = _import_backend(name)
        except ImportError as exc:
            raise ValueError(f"backend: {name!r} cannot be imported ({exc})") from exc
    backend = _loaded[name]
    reason = backend.unavailable(device)
    if reason is not None:
        raise ValueError(f"backend: {name!r} cannot run on {device}: {reason}")
    return backend


def _import_backend(name: str) -> DecodeBackend:
    """Import a backend's module on first use (triton's needs triton, numba's numba)."""
    if name == "triton":
        from kvviz.kv import attention_triton as module
    elif name == "numba":
        from kvviz.kv import attention_numba as module
    else:
        from kvviz.kv import attention_torch as module
    return module.BACKEND


def _importable(package: str) -> bool:
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):  # e.g. sys.modules["triton"] = None
        return False


def _need(cond: bool, arg: str, msg: str) -> None:
    if not cond:
        raise ValueError(f"{arg}: {msg}")


def _check_common(q, k, v, kv_names: tuple[str, str], index: torch.Tensor, index_name: str,
                  context_lens, scale) -> float:
    """Checks shared by both layouts; returns the softmax scale."""
    kn, vn = kv_names
    kv_dims = 4 if kn == "k_cache" else 3
    for name, t in (("q", q), (kn, k), (vn, v), (index_name, index),
                    ("context_lens", context_lens)):
        _need(isinstance(t, torch.Tensor), name, f"must be a torch.Tensor, got {type(t).__name__}")
    _need(q.dim() == 3, "q", f"need [batch, num_heads, head_dim], got shape {tuple(q.shape)}")
    _need(q.dtype in FLOAT_DTYPES, "q", f"dtype {q.dtype} is not float32/bfloat16/float16")
    _need(k.dim() == kv_dims, kn, f"need {kv_dims} dims, got shape {tuple(k.shape)}")
    _need(v.shape == k.shape, vn, f"shape {tuple(v.shape)} != {kn} {tuple(k.shape)}")
    for name, t in ((kn, k), (vn, v)):
        _need(t.dtype == q.dtype, name, f"dtype {t.dtype} differs from q's {q.dtype}")
    for name, t in ((kn, k), (vn, v), (index_name, index),
                    ("context_lens", context_lens)):
        _need(t.device == q.device, name, f"is on {t.device}, q is on {q.device}")
    batch, heads, dim = q.shape
    kv_heads = k.shape[-2]
    _need(k.shape[-1] == dim, kn, f"head_dim {k.shape[-1]} != q's head_dim {dim}")
    _need(heads % kv_heads == 0, "q",
          f"num_heads {heads} is not a multiple of num_kv_heads {kv_heads} (GQA)")
    _need(context_lens.dtype == torch.int32, "context_lens",
          f"must be int32, got {context_lens.dtype}")
    _need(tuple(context_lens.shape) == (batch,), "context_lens",
          f"need shape ({batch},), got {tuple(context_lens.shape)}")
    if scale is None:
        return 1.0 / math.sqrt(dim)
    _need(isinstance(scale, (int, float)) and math.isfinite(scale) and scale > 0, "scale",
          f"must be a positive finite number, got {scale!r}")
    return float(scale)


def _check_lens(lens: np.ndarray, capacity: int, what: str) -> None:
    if lens.size and lens.min() < 1:
        b = int(np.argmin(lens))
        raise ValueError(f"context_lens: sequence {b} has length {int(lens[b])}; need >= 1")
    if lens.size and lens.max() > capacity:
        b = int(np.argmax(lens))
        raise ValueError(f"context_lens: sequence {b} has length {int(lens[b])} beyond the "
                         f"{what} of {capacity} tokens")


def paged_decode_attention(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
    block_tables: torch.Tensor, context_lens: torch.Tensor, scale: float | None = None,
    backend: str = "auto", *, check_values: bool = True,
) -> torch.Tensor:
    """Attention of q [B, H, D] over each sequence's first context_lens[b] cached tokens.

    k_cache, v_cache: [num_blocks, block_size, num_kv_heads, D] (NHD); block_tables: int32
    [B, max_blocks_per_seq], token t of sequence b lives in block block_tables[b, t // bs] at
    offset t % bs. Returns [B, H, D] in q's dtype. `check_values` also checks lengths and
    block ids (on CUDA this copies the small index tensors to the host: one sync).
    """
    scale = _check_common(q, k_cache, v_cache, ("k_cache", "v_cache"), block_tables,
                          "block_tables", context_lens, scale)
    batch = q.shape[0]
    num_blocks, block_size = k_cache.shape[:2]
    _need(block_tables.dtype == torch.int32, "block_tables",
          f"must be int32, got {block_tables.dtype}")
    _need(block_tables.dim() == 2 and block_tables.shape[0] == batch, "block_tables",
          f"need [batch={batch}, max_blocks_per_seq], got shape {tuple(block_tables.shape)}")
    _need(block_tables.shape[1] >= 1, "block_tables", "has no columns")
    impl = get_backend(backend, q.device)
    impl.check_layout({"q": q, "k_cache": k_cache, "v_cache": v_cache,
                       "block_tables": block_tables, "context_lens": context_lens})
    lens_host = None
    if check_values:
        lens_host = context_lens.cpu().numpy().astype(np.int64)
        _check_lens(lens_host, block_tables.shape[1] * block_size, "block table capacity")
        tables = block_tables.cpu().numpy()
        used = np.arange(tables.shape[1])[None, :] < (-(-lens_host // block_size))[:, None]
        bad = used & ((tables < 0) | (tables >= num_blocks))
        if bad.any():
            b, j = (int(x[0]) for x in np.nonzero(bad))
            raise ValueError(f"block_tables: entry [{b}, {j}] = {int(tables[b, j])} is outside "
                             f"0..{num_blocks - 1} (num_blocks={num_blocks})")
    if batch == 0:
        return torch.empty_like(q)
    meta = DecodeMeta(scale, lens_host)
    return impl.paged(q, k_cache, v_cache, block_tables, context_lens, meta)


def contiguous_decode_attention(
    q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor,
    starts: torch.Tensor, context_lens: torch.Tensor, scale: float | None = None,
    backend: str = "auto", *, check_values: bool = True,
) -> torch.Tensor:
    """Attention of q [B, H, D] over pool rows starts[b] .. starts[b] + context_lens[b] - 1.

    k_pool, v_pool: [capacity, num_kv_heads, D]; starts: int64 or int32 [B].
    """
    scale = _check_common(q, k_pool, v_pool, ("k_pool", "v_pool"), starts, "starts",
                          context_lens, scale)
    batch = q.shape[0]
    _need(starts.dtype in (torch.int32, torch.int64), "starts",
          f"must be int32 or int64, got {starts.dtype}")
    _need(tuple(starts.shape) == (batch,), "starts",
          f"need shape ({batch},), got {tuple(starts.shape)}")
    impl = get_backend(backend, q.device)
    impl.check_layout({"q": q, "k_pool": k_pool, "v_pool": v_pool, "starts": starts,
                       "context_lens": context_lens})
    lens_host = None
    if check_values:
        lens_host = context_lens.cpu().numpy().astype(np.int64)
        capacity = k_pool.shape[0]
        _check_lens(lens_host, capacity, "pool capacity")
        st = starts.cpu().numpy().astype(np.int64)
        bad = (st < 0) | (st + lens_host > capacity)
        if bad.any():
            b = int(np.argmax(bad))
            raise ValueError(f"starts: sequence {b} range {int(st[b])}..{int(st[b] + lens_host[b])}"
                             f" is outside the pool of {capacity} slots")
    if batch == 0:
        return torch.empty_like(q)
    meta = DecodeMeta(scale, lens_host)
    return impl.contiguous(q, k_pool, v_pool, starts, context_lens, meta)
