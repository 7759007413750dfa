"""Numba backend (CPU): decode attention that reads K/V where they lie, each byte once.

One compiled kernel serves both layouts. A contiguous pool [capacity, kv_heads, D] is the
paged layout with a single block of `capacity` slots and a table of one entry, so the two
layouts run the same instructions and differ only by the table lookup and where the blocks
lie: the measured gap between them is the cost of the indirection, nothing else.

    for sequences b of this thread's range (torch's thread count of ranges with about equal
    tokens; the kernel runs without the GIL), each read in order, all heads at once:
      for each tile of TILE tokens:
        pos = start[b] + t;  row = (table[b, pos // bs], pos % bs)     no copy of the row
        s[h, t] = q[b, h] . K[row, h // group] * scale                [H, TILE]
        online softmax: m = max(m, max_t s), rescale acc and l by exp(m_old - m)
        acc[h] += exp(s[h, t] - m) * V[row, h // group];  l += sum_t exp(s - m)
      out[b, h] = acc[h] / l[h]

Scores, softmax and the accumulator are float32. 16-bit caches go to the torch backend
(numpy has no bfloat16, so numba cannot read a bfloat16 tensor in place).
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from kvviz.kv.attention_backend import DecodeMeta

TILE = 32  # tokens scored before one softmax rescale; the [H, TILE] scores stay in L1
MIN_TOKENS = 4096  # per thread: below that a thread costs more than it saves
AHEAD = 4  # with small blocks, rows are prefetched this many tokens before they are read
PREFETCH_BLOCK_BYTES = 16 << 10  # blocks up to this size (per pool) are prefetched by hand:
# a random 4 KiB row is over before the hardware prefetcher has found the stream
LINE = 64  # bytes per prefetch


@intrinsic
def _prefetch(typingctx, address):  # pragma: no cover - compiled
    """A hint that the cache line at `address` is read soon (never faults)."""
    def codegen(context, builder, signature, args):
        i8p, i32 = ir.IntType(8).as_pointer(), ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0")
        builder.call(fn, [builder.inttoptr(args[0], i8p), i32(0), i32(3), i32(1)])
        return context.get_dummy_value()
    return types.void(types.uintp), codegen


@njit(inline="always")
def _prefetch_row(pool, tables, b, pos, bs, row_bytes):  # pragma: no cover - compiled
    """Prefetch the slot of position `pos` (all kv heads) of sequence b."""
    blk = tables[b, pos // bs]
    base = pool.ctypes.data + blk * pool.strides[0] + (pos % bs) * pool.strides[1]
    for line in range(0, row_bytes, LINE):
        _prefetch(base + line)


@njit(nogil=True, fastmath=True, cache=True, boundscheck=False)
def _decode(q, k, v, tables, starts, lens, scale, out, ahead, lo, hi):  # pragma: no cover
    """Sequences lo..hi-1. q, out [B, H, D] f32; k, v [blocks, bs, kvh, D] f32; tables int32
    [B, M]; starts, lens int64 [B]. Token t of sequence b: pos = starts[b] + t in block
    tables[b, pos // bs] at offset pos % bs. ahead > 0: prefetch rows that many tokens early.
    Runs without the GIL: threads take disjoint ranges of sequences."""
    batch, heads, dim = q.shape
    bs, kvh = k.shape[1], k.shape[2]
    group = heads // kvh
    row_bytes = kvh * k.strides[2]
    for b in range(lo, hi):
        n, start = lens[b], starts[b]
        qs = np.empty((heads, dim), np.float32)
        for h in range(heads):
            for d in range(dim):
                qs[h, d] = q[b, h, d] * scale
        acc = np.zeros((heads, dim), np.float32)
        m = np.full(heads, -np.inf, np.float32)
        l_sum = np.zeros(heads, np.float32)
        s = np.empty((heads, TILE), np.float32)
        for t0 in range(0, n, TILE):
            width = min(TILE, n - t0)
            col, off = divmod(start + t0, bs)
            for j in range(width):
                if ahead and j + ahead < n - t0:
                    _prefetch_row(k, tables, b, start + t0 + j + ahead, bs, row_bytes)
                blk = tables[b, col]
                for h in range(heads):
                    kh = h // group
                    a = np.float32(0.0)
                    for d in range(dim):
                        a += qs[h, d] * k[blk, off, kh, d]
                    s[h, j] = a
                off += 1
                if off == bs:
                    col, off = col + 1, 0
            for h in range(heads):
                top = m[h]
                for j in range(width):
                    top = max(top, s[h, j])
                c = np.exp(m[h] - top)
                m[h] = top
                total = l_sum[h] * c
                for d in range(dim):
                    acc[h, d] *= c
                for j in range(width):
                    p = np.exp(s[h, j] - top)
                    s[h, j] = p
                    total += p
                l_sum[h] = total
            col, off = divmod(start + t0, bs)
            for j in range(width):
                if ahead and j + ahead < n - t0:
                    _prefetch_row(v, tables, b, start + t0 + j + ahead, bs, row_bytes)
                blk = tables[b, col]
                for h in range(heads):
                    kh = h // group
                    p = s[h, j]
                    for d in range(dim):
                        acc[h, d] += p * v[blk, off, kh, d]
                off += 1
                if off == bs:
                    col, off = col + 1, 0
        for h in range(heads):
            inv = np.float32(1.0) / l_sum[h]
            for d in range(dim):
                out[b, h, d] = acc[h, d] * inv


class NumbaBackend:
    name = "numba"

    def unavailable(self, device: torch.device) -> str | None:
        return None if device.type == "cpu" else "numba kernels run on the CPU only"

    def check_layout(self, tensors: dict[str, torch.Tensor]) -> None:
        return None  # any strides: the kernel indexes numpy views of the tensors as they are

    def paged(self, q, k_cache, v_cache, block_tables, context_lens, meta: DecodeMeta):
        if q.dtype != torch.float32:
            return _torch().paged(q, k_cache, v_cache, block_tables, context_lens, meta)
        starts = np.zeros(q.shape[0], np.int64)
        return _run(q, k_cache, v_cache, block_tables.numpy(), starts, context_lens, meta)

    def contiguous(self, q, k_pool, v_pool, starts, context_lens, meta: DecodeMeta):
        if q.dtype != torch.float32:
            return _torch().contiguous(q, k_pool, v_pool, starts, context_lens, meta)
        one_block = np.zeros((q.shape[0], 1), np.int32)  # the whole pool is block 0
        return _run(q, k_pool.unsqueeze(0), v_pool.unsqueeze(0), one_block,
                    starts.numpy().astype(np.int64, copy=False), context_lens, meta)


def _run(q, k, v, tables: np.ndarray, starts: np.ndarray, context_lens, meta: DecodeMeta):
    lens = meta.lens_host if meta.lens_host is not None else context_lens.numpy()
    out = torch.empty(q.shape, dtype=torch.float32)
    block_bytes = k.shape[1] * k.shape[2] * k.stride(2) * k.element_size()
    ahead = AHEAD if block_bytes <= PREFETCH_BLOCK_BYTES else 0
    args = (q.numpy(), k.numpy(), v.numpy(), tables, starts, lens.astype(np.int64, copy=False),
            np.float32(meta.scale), out.numpy(), ahead)
    cuts = _split(args[5], torch.get_num_threads())
    rest = [_pool(len(cuts) - 2).submit(_decode, *args, lo, hi)
            for lo, hi in zip(cuts[1:-1], cuts[2:])]
    _decode(*args, 0, cuts[1])  # the first range in this thread
    for f in rest:
        f.result()
    return out


def _split(lens: np.ndarray, threads: int) -> list[int]:
    """Cut points of at most `threads` consecutive ranges of sequences with about equal
    tokens (a small batch gets fewer ranges: MIN_TOKENS each at least)."""
    total = int(lens.sum())
    parts = max(1, min(threads, len(lens), total // MIN_TOKENS))
    if parts == 1:
        return [0, len(lens)]
    at = np.searchsorted(np.cumsum(lens), total * np.arange(1, parts) / parts) + 1
    return sorted({0, *np.minimum(at, len(lens)).tolist(), len(lens)})


_pools: dict[int, ThreadPoolExecutor] = {}


def _pool(n: int) -> ThreadPoolExecutor:
    if n not in _pools:
        _pools[n] = ThreadPoolExecutor(n, thread_name_prefix="kvviz-attn")
    return _pools[n]


def _torch():
    from kvviz.kv.attention_torch import BACKEND as torch_backend

    return torch_backend


BACKEND = NumbaBackend()
