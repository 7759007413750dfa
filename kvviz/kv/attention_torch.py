"""Torch backend: gather K/V into a reusable buffer, then scaled_dot_product_attention.

Paged: the used blocks of a chunk of sequences are copied with one index_select per pool
into a workspace laid out [n, blocks*bs, kv_heads, D], which SDPA reads as the strided view
[n, kv_heads, tokens, D]. On CPU the chunk is capped at CPU_CHUNK_BYTES so that the copy
stays in the last-level cache while SDPA reads it (gathering the whole batch first and then
attending is slower: docs/BENCHMARKS.md, decision log). On CUDA the whole batch is one
chunk. Padding inside a chunk is masked out.

Contiguous: no copy when the ranges are evenly spaced (one strided view of the pool covers
the batch); otherwise one SDPA per sequence on its slice (CPU) or a padded gather (CUDA).
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from kvviz.kv.attention_backend import DecodeMeta

CPU_CHUNK_BYTES = 8 << 20  # K+V bytes gathered per chunk on CPU (fits a 32 MiB L3 twice)


class TorchBackend:
    name = "torch"

    def __init__(self) -> None:
        self._work: dict[tuple, torch.Tensor] = {}
        self.chunk_bytes: int | None = None  # override the per-device default (tests)

    def unavailable(self, device: torch.device) -> str | None:
        return None

    def check_layout(self, tensors: dict[str, torch.Tensor]) -> None:
        return None  # any strides: SDPA and index_select take them as they are

    def _buffer(self, tag: str, numel: int, like: torch.Tensor) -> torch.Tensor:
        """A flat scratch tensor of >= numel elements, reused across calls (grows only)."""
        key = (tag, like.device, like.dtype)
        buf = self._work.get(key)
        if buf is None or buf.numel() < numel:
            buf = torch.empty(numel, dtype=like.dtype, device=like.device)
            self._work[key] = buf
        return buf[:numel]

    def _budget(self, device: torch.device) -> float:
        if self.chunk_bytes is not None:
            return self.chunk_bytes
        return CPU_CHUNK_BYTES if device.type == "cpu" else float("inf")

    @staticmethod
    def _lens(context_lens: torch.Tensor, meta: DecodeMeta) -> np.ndarray:
        return meta.lens_host if meta.lens_host is not None else (
            context_lens.cpu().numpy().astype(np.int64))

    def paged(self, q, k_cache, v_cache, block_tables, context_lens, meta: DecodeMeta):
        lens = self._lens(context_lens, meta)
        _, bs, kvh, d = k_cache.shape
        gqa = q.shape[1] != kvh
        blocks = -(-lens // bs)
        token_bytes = 2 * kvh * d * k_cache.element_size()
        chunks = list(_chunks(lens, bs, self._budget(q.device) / token_bytes))
        widest = int(blocks.max())
        tables = block_tables[:, :widest].long()  # int64 indices gathered faster than int32
        cols = torch.arange(widest, device=q.device)
        if len(chunks) < len(lens):  # some chunk holds several sequences, padded to its widest:
            # columns past a row's used blocks may hold anything, so read block 0 there instead
            used = (context_lens[:, None].long() + (bs - 1)) // bs
            tables = torch.where(cols[None, :] < used, tables, torch.zeros_like(tables))
        keep = None  # [B, widest * bs] key padding mask, built only if some chunk needs it
        biggest = max((hi - lo) * nblk for lo, hi, nblk in chunks) * bs * kvh * d
        kbuf, vbuf = self._buffer("k", biggest, k_cache), self._buffer("v", biggest, v_cache)
        qs = q.unsqueeze(2)  # [B, H, 1, d]
        out = torch.empty_like(q)
        for lo, hi, nblk in chunks:
            n, width = hi - lo, nblk * bs
            idx = tables[lo:hi, :nblk].reshape(-1)
            size = n * width * kvh * d
            torch.index_select(k_cache, 0, idx, out=kbuf[:size].view(n * nblk, bs, kvh, d))
            torch.index_select(v_cache, 0, idx, out=vbuf[:size].view(n * nblk, bs, kvh, d))
            k = kbuf[:size].view(n, width, kvh, d).transpose(1, 2)  # [n, kvh, width, d]
            v = vbuf[:size].view(n, width, kvh, d).transpose(1, 2)
            mask = None
            if n == 1:
                k, v = k[:, :, : int(lens[lo])], v[:, :, : int(lens[lo])]
            elif int(lens[lo:hi].min()) < width:
                if keep is None:
                    keep = torch.arange(widest * bs, device=q.device)[None, :] < (
                        context_lens[:, None])
                mask = keep[lo:hi, None, None, :width]
            o = F.scaled_dot_product_attention(qs[lo:hi], k, v, attn_mask=mask,
                                               scale=meta.scale, enable_gqa=gqa)
            out[lo:hi] = o.squeeze(2)
        return out

    def contiguous(self, q, k_pool, v_pool, starts, context_lens, meta: DecodeMeta):
        lens = self._lens(context_lens, meta)
        st = starts.cpu().numpy().astype(np.int64)
        batch, heads = q.shape[:2]
        cap, kvh, d = k_pool.shape
        gqa = heads != kvh
        lmax = int(lens.max())
        steps = np.diff(st)
        step = int(steps[0]) if steps.size else 0
        if (steps == step).all() and step >= 0 and st[0] + step * (batch - 1) + lmax <= cap:
            # one strided view [B, kvh, lmax, d] covers every range: no copy at all
            k = _strided(k_pool, int(st[0]), step, batch, lmax)
            v = _strided(v_pool, int(st[0]), step, batch, lmax)
            return _sdpa(q, k, v, lens, context_lens, meta.scale, gqa)
        if q.device.type == "cpu":
            out = torch.empty_like(q)
            for b in range(batch):
                s, n = int(st[b]), int(lens[b])
                k = k_pool[s:s + n].transpose(0, 1).unsqueeze(0)
                v = v_pool[s:s + n].transpose(0, 1).unsqueeze(0)
                out[b:b + 1] = _sdpa(q[b:b + 1], k, v, lens[b:b + 1], None, meta.scale, gqa)
            return out
        rows = starts.long()[:, None] + torch.arange(lmax, device=q.device)[None, :]
        rows = torch.minimum(rows, torch.full_like(rows, cap - 1)).reshape(-1)
        k = k_pool.index_select(0, rows).view(batch, lmax, kvh, d).transpose(1, 2)
        v = v_pool.index_select(0, rows).view(batch, lmax, kvh, d).transpose(1, 2)
        return _sdpa(q, k, v, lens, context_lens, meta.scale, gqa)


def _strided(pool: torch.Tensor, first: int, step: int, batch: int, length: int) -> torch.Tensor:
    s0, s1, s2 = pool.stride()
    return pool.as_strided((batch, pool.shape[1], length, pool.shape[2]),
                           (step * s0, s1, s0, s2), pool.storage_offset() + first * s0)


def _sdpa(q, k, v, lens: np.ndarray, lens_t: torch.Tensor | None, scale: float, gqa: bool):
    """q [n, H, D], k/v [n, kvh, L, D] -> [n, H, D]; keys past lens[i] are padding."""
    n, width = k.shape[0], k.shape[2]
    mask = None
    if n == 1:
        k, v = k[:, :, : int(lens[0])], v[:, :, : int(lens[0])]
    elif int(lens.min()) < width:
        cols = torch.arange(width, device=q.device)
        mask = (cols[None, :] < lens_t[:, None]).view(n, 1, 1, width)
    o = F.scaled_dot_product_attention(q.unsqueeze(2), k, v, attn_mask=mask, scale=scale,
                                       enable_gqa=gqa)
    return o.squeeze(2)


def _chunks(lens: np.ndarray, block_size: int, budget_tokens: float):
    """Consecutive (lo, hi, blocks) groups whose padded token count fits the budget."""
    blocks = -(-lens // block_size)
    lo, widest = 0, 0
    for i in range(len(lens)):
        w = max(widest, int(blocks[i]))
        if i > lo and (i + 1 - lo) * w * block_size > budget_tokens:
            yield lo, i, widest
            lo, w = i, int(blocks[i])
        widest = w
    yield lo, len(lens), widest


BACKEND = TorchBackend()
