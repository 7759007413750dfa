r"""Triton backend: flash-decoding over paged or contiguous K/V (split-K, then a merge).

One program per (sequence, kv head, split). It loads the GROUP query heads that share the
kv head as one [GROUP_PAD, D] tile, walks its share of the context BLOCK_N tokens at a time
(block ids read from the block table inside the loop), and keeps an online softmax:

    split 0      split 1      split 2          tokens of one sequence
    [........]   [........]   [....]           each: m (running max), l (sum), acc
         \            |           /
          merge: out = sum_s 2^(lse_s - M) * o_s / sum_s 2^(lse_s - M)

With one split the first kernel writes the output itself and no merge runs.
fp32 inputs use "ieee" dots (no TF32). Under the interpreter every dot runs in fp32, because
its numpy dot mishandles bfloat16; the bf16 tensor-core path is checked on CUDA only.
Imported only when the "triton" backend is asked for; CPU tensors work under
TRITON_INTERPRET=1 (set before triton is imported).
"""
from __future__ import annotations

import os
from typing import NamedTuple

import torch
import triton
import triton.language as tl

from kvviz.kv.attention_backend import DecodeMeta

LOG2E = 1.4426950408889634


@triton.jit
def _decode_split(
    q_ptr, k_ptr, v_ptr, tables_ptr, starts_ptr, lens_ptr, out_ptr, part_ptr, lse_ptr,
    scale_log2, sq_b, sq_h, sk_blk, sk_tok, sk_h, sv_blk, sv_tok, sv_h, st_b, so_b, so_h,
    split_len, num_splits,
    GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, HEAD_DIM: tl.constexpr, D_PAD: tl.constexpr,
    PAGE: tl.constexpr, BLOCK_N: tl.constexpr, PAGED: tl.constexpr, F32_DOT: tl.constexpr,
    DIRECT: tl.constexpr,
):
    b = tl.program_id(0)
    kvh = tl.program_id(1)
    split = tl.program_id(2)
    ctx = tl.load(lens_ptr + b)
    lo = split * split_len
    hi = tl.minimum(lo + split_len, ctx)
    g = tl.arange(0, GROUP_PAD)
    d = tl.arange(0, D_PAD)
    heads = kvh * GROUP + g
    gd_ok = (g < GROUP)[:, None] & (d < HEAD_DIM)[None, :]
    q = tl.load(q_ptr + b.to(tl.int64) * sq_b + heads[:, None] * sq_h + d[None, :],
                mask=gd_ok, other=0.0)  # [GROUP_PAD, D_PAD]
    m_i = tl.full([GROUP_PAD], float("-inf"), tl.float32)
    l_i = tl.zeros([GROUP_PAD], tl.float32)
    acc = tl.zeros([GROUP_PAD, D_PAD], tl.float32)
    k_head = k_ptr + kvh * sk_h
    v_head = v_ptr + kvh * sv_h
    table_row = tables_ptr + b.to(tl.int64) * st_b
    base = tl.load(starts_ptr + b).to(tl.int64)
    for start in range(lo, hi, BLOCK_N):
        pos = start + tl.arange(0, BLOCK_N)
        ok = pos < hi
        if PAGED:
            # invariant: only table entries of used blocks are read (masked otherwise)
            blk = tl.load(table_row + pos // PAGE, mask=ok, other=0).to(tl.int64)
            k_rows = blk * sk_blk + (pos % PAGE) * sk_tok
            v_rows = blk * sv_blk + (pos % PAGE) * sv_tok
        else:
            k_rows = (base + pos) * sk_tok
            v_rows = (base + pos) * sv_tok
        nd_ok = ok[:, None] & (d < HEAD_DIM)[None, :]
        k = tl.load(k_head + k_rows[:, None] + d[None, :], mask=nd_ok, other=0.0)  # [N, D]
        if F32_DOT:  # fp32: no TF32 rounding on tensor cores
            s = tl.dot(q.to(tl.float32), tl.trans(k.to(tl.float32)), input_precision="ieee")
        else:
            s = tl.dot(q, tl.trans(k))
        s = tl.where(ok[None, :], s * scale_log2, float("-inf"))  # [GROUP_PAD, N], log2 units
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_head + v_rows[:, None] + d[None, :], mask=nd_ok, other=0.0)
        if F32_DOT:
            acc = acc * alpha[:, None] + tl.dot(p, v.to(tl.float32), input_precision="ieee")
        else:
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    if DIRECT:
        o = acc / l_i[:, None]
        tl.store(out_ptr + b.to(tl.int64) * so_b + heads[:, None] * so_h + d[None, :],
                 o.to(out_ptr.dtype.element_ty), mask=gd_ok)
    else:
        has = l_i > 0.0  # an empty split (past this sequence's end) has weight zero
        l_safe = tl.where(has, l_i, 1.0)
        lse = tl.where(has, m_i + tl.log2(l_safe), float("-inf"))
        row = (b * (tl.num_programs(1) * GROUP) + heads) * num_splits + split
        tl.store(lse_ptr + row, lse, mask=g < GROUP)
        tl.store(part_ptr + row[:, None] * HEAD_DIM + d[None, :], acc / l_safe[:, None],
                 mask=gd_ok)


@triton.jit
def _merge_splits(
    part_ptr, lse_ptr, out_ptr, so_b, so_h, num_splits,
    HEAD_DIM: tl.constexpr, D_PAD: tl.constexpr, S_PAD: tl.constexpr,
):
    b = tl.program_id(0)
    h = tl.program_id(1)
    s = tl.arange(0, S_PAD)
    d = tl.arange(0, D_PAD)
    row = (b * tl.num_programs(1) + h) * num_splits + s
    s_ok = s < num_splits
    lse = tl.load(lse_ptr + row, mask=s_ok, other=float("-inf"))
    w = tl.exp2(lse - tl.max(lse, 0))  # split 0 is never empty, so the max is finite
    o = tl.load(part_ptr + row[:, None] * HEAD_DIM + d[None, :],
                mask=s_ok[:, None] & (d < HEAD_DIM)[None, :], other=0.0)
    res = tl.sum(o * w[:, None], 0) / tl.sum(w, 0)
    tl.store(out_ptr + b.to(tl.int64) * so_b + h * so_h + d, res.to(out_ptr.dtype.element_ty),
             mask=d < HEAD_DIM)


class LaunchConfig(NamedTuple):
    block_n: int  # tokens per loop iteration
    num_warps: int
    num_stages: int
    num_splits: int | None = None  # None: chosen from batch * kv_heads vs SM count


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def default_config(dtype: torch.dtype, head_dim: int) -> LaunchConfig:
    if interpreting():
        return LaunchConfig(16, 1, 1)
    if dtype == torch.float32:  # ieee dots run on FMA units: smaller tiles
        return LaunchConfig(32, 4, 2)
    return LaunchConfig(64 if head_dim <= 128 else 32, 4, 2)


_sm_counts: dict[int, int] = {}


def _num_sms(device: torch.device) -> int:
    if device.type != "cuda":
        return 4
    idx = device.index if device.index is not None else torch.cuda.current_device()
    if idx not in _sm_counts:
        _sm_counts[idx] = torch.cuda.get_device_properties(idx).multi_processor_count
    return _sm_counts[idx]


def choose_num_splits(batch: int, kv_heads: int, max_len: int, block_n: int,
                      device: torch.device) -> int:
    """Enough programs for ~4 per SM, each split still >= 4 loop iterations."""
    tiles = triton.cdiv(max_len, block_n)
    want = triton.cdiv(4 * _num_sms(device), batch * kv_heads)
    return max(1, min(want, triton.cdiv(tiles, 4), 64))


def decode(q, k, v, tables, starts, lens, scale: float, max_len: int, paged: bool,
           config: LaunchConfig | None = None) -> torch.Tensor:
    """Launch without checks (attention.py validates). k/v: paged 4-D or contiguous 3-D."""
    batch, heads, dim = q.shape
    kvh = k.shape[-2]
    group = heads // kvh
    cfg = config or default_config(q.dtype, dim)
    splits = cfg.num_splits or choose_num_splits(batch, kvh, max_len, cfg.block_n, q.device)
    split_len = triton.cdiv(triton.cdiv(max_len, splits), cfg.block_n) * cfg.block_n
    splits = triton.cdiv(max_len, split_len)
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    d_pad = max(16, triton.next_power_of_2(dim))
    if splits > 1:
        part = torch.empty((batch, heads, splits, dim), dtype=torch.float32, device=q.device)
        lse = torch.empty((batch, heads, splits), dtype=torch.float32, device=q.device)
    else:
        part = lse = out  # unused
    if paged:
        sk_blk, sk_tok, sk_h = k.stride(0), k.stride(1), k.stride(2)
        sv_blk, sv_tok, sv_h = v.stride(0), v.stride(1), v.stride(2)
        page, st_b, starts = k.shape[1], tables.stride(0), lens
    else:
        sk_blk, sk_tok, sk_h = 0, k.stride(0), k.stride(1)
        sv_blk, sv_tok, sv_h = 0, v.stride(0), v.stride(1)
        page, st_b, tables = 1, 0, lens
    _decode_split[(batch, kvh, splits)](
        q, k, v, tables, starts, lens, out, part, lse,
        scale * LOG2E, q.stride(0), q.stride(1), sk_blk, sk_tok, sk_h, sv_blk, sv_tok, sv_h,
        st_b, out.stride(0), out.stride(1), split_len, splits,
        GROUP=group, GROUP_PAD=max(16, triton.next_power_of_2(group)), HEAD_DIM=dim,
        D_PAD=d_pad, PAGE=page, BLOCK_N=cfg.block_n, PAGED=paged,
        F32_DOT=q.dtype == torch.float32 or interpreting(), DIRECT=splits == 1,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )
    if splits > 1:
        _merge_splits[(batch, heads)](
            part, lse, out, out.stride(0), out.stride(1), splits,
            HEAD_DIM=dim, D_PAD=d_pad, S_PAD=max(2, triton.next_power_of_2(splits)),
            num_warps=4 if dim >= 128 else 2,
        )
    return out


class TritonBackend:
    name = "triton"

    def unavailable(self, device: torch.device) -> str | None:
        if device.type == "cuda" or interpreting():
            return None
        return "needs a CUDA device (or TRITON_INTERPRET=1 set before triton is imported)"

    def check_layout(self, tensors: dict[str, torch.Tensor]) -> None:
        for name, t in tensors.items():
            if t.numel() > 1 and t.stride(-1) != 1:
                raise ValueError(f"{name}: the triton backend needs the last dimension "
                                 f"contiguous (stride 1), got strides {t.stride()}")

    def paged(self, q, k_cache, v_cache, block_tables, context_lens, meta: DecodeMeta):
        max_len = block_tables.shape[1] * k_cache.shape[1]  # no sync: the table's capacity
        if meta.lens_host is not None:
            max_len = int(meta.lens_host.max())
        return decode(q, k_cache, v_cache, block_tables, None, context_lens, meta.scale,
                      max_len, paged=True)

    def contiguous(self, q, k_pool, v_pool, starts, context_lens, meta: DecodeMeta):
        lens = meta.lens_host
        max_len = int(lens.max()) if lens is not None else int(context_lens.max())
        return decode(q, k_pool, v_pool, None, starts, context_lens, meta.scale, max_len,
                      paged=False)


BACKEND = TritonBackend()
