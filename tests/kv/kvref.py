"""Test helpers: random paged/contiguous decode cases and the plain-SDPA reference.

The reference gathers each sequence's K/V token by token through its block table (or range)
into contiguous tensors, expands GQA heads explicitly and runs float32 SDPA one sequence at a
time: nothing shared with the code under test beyond torch itself.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass
class Case:
    q: torch.Tensor  # [B, H, D]
    k: torch.Tensor  # paged [num_blocks, bs, kvh, D] or contiguous [cap, kvh, D]
    v: torch.Tensor
    index: torch.Tensor  # paged: block tables int32 [B, M]; contiguous: starts int64 [B]
    lens: torch.Tensor  # int32 [B]
    seq_k: list[torch.Tensor]  # per sequence [len, kvh, D], gathered independently
    seq_v: list[torch.Tensor]

    def expected(self, scale: float | None = None) -> torch.Tensor:
        return reference(self.q, self.seq_k, self.seq_v, scale)


def paged_case(lens, heads=4, kv_heads=2, head_dim=16, block_size=4, dtype=torch.float32,
               device="cpu", seed=0, shuffle=True, spare_blocks=3, pad=0) -> Case:
    """Blocks handed out in random order; table columns past a sequence's blocks = `pad`."""
    g = torch.Generator().manual_seed(seed)
    nblk = [math.ceil(n / block_size) for n in lens]
    num_blocks = sum(nblk) + spare_blocks
    order = torch.randperm(num_blocks, generator=g) if shuffle else torch.arange(num_blocks)
    width = max(nblk) + 1  # one spare column, as an allocator's padded table would have
    tables = torch.full((len(lens), width), pad, dtype=torch.int32)
    used = 0
    for b, n in enumerate(nblk):
        tables[b, :n] = order[used:used + n].to(torch.int32)
        used += n
    k = torch.randn(num_blocks, block_size, kv_heads, head_dim, generator=g).to(dtype)
    v = torch.randn(num_blocks, block_size, kv_heads, head_dim, generator=g).to(dtype)
    q = torch.randn(len(lens), heads, head_dim, generator=g).to(dtype)
    seq_k, seq_v = [], []
    for b, n in enumerate(lens):
        rows = [(int(tables[b, t // block_size]), t % block_size) for t in range(n)]
        seq_k.append(torch.stack([k[i, o] for i, o in rows]))
        seq_v.append(torch.stack([v[i, o] for i, o in rows]))
    lens_t = torch.tensor(lens, dtype=torch.int32)
    return Case(q.to(device), k.to(device), v.to(device), tables.to(device), lens_t.to(device),
                seq_k, seq_v)


def contiguous_case(lens, heads=4, kv_heads=2, head_dim=16, dtype=torch.float32, device="cpu",
                    seed=0, gaps=True) -> Case:
    """Ranges in the pool in shuffled order, with random holes between them when `gaps`."""
    g = torch.Generator().manual_seed(seed)
    order = torch.randperm(len(lens), generator=g).tolist()
    starts = [0] * len(lens)
    cursor = 0
    for b in order:
        cursor += int(torch.randint(0, 5, (1,), generator=g)) if gaps else 0
        starts[b] = cursor
        cursor += lens[b]
    cap = cursor + 3
    k = torch.randn(cap, kv_heads, head_dim, generator=g).to(dtype)
    v = torch.randn(cap, kv_heads, head_dim, generator=g).to(dtype)
    q = torch.randn(len(lens), heads, head_dim, generator=g).to(dtype)
    seq_k = [k[s:s + n].clone() for s, n in zip(starts, lens)]
    seq_v = [v[s:s + n].clone() for s, n in zip(starts, lens)]
    return Case(q.to(device), k.to(device), v.to(device),
                torch.tensor(starts, dtype=torch.int64, device=device),
                torch.tensor(lens, dtype=torch.int32, device=device), seq_k, seq_v)


def reference(q, seq_k, seq_v, scale=None) -> torch.Tensor:
    """float32 [B, H, D]: SDPA per sequence over its gathered, GQA-expanded K/V."""
    heads = q.shape[1]
    outs = []
    for b, (k, v) in enumerate(zip(seq_k, seq_v)):
        rep = heads // k.shape[1]
        k = k.float().cpu().transpose(0, 1).repeat_interleave(rep, 0)  # [H, len, D]
        v = v.float().cpu().transpose(0, 1).repeat_interleave(rep, 0)
        qb = q[b].float().cpu()[:, None, :]  # [H, 1, D]
        outs.append(F.scaled_dot_product_attention(qb, k, v, scale=scale)[:, 0])
    return torch.stack(outs)


TOLERANCE = {torch.float32: 2e-5, torch.bfloat16: 3e-2, torch.float16: 5e-3}


def assert_close(out: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype) -> None:
    tol = TOLERANCE[dtype]
    torch.testing.assert_close(out.float().cpu(), expected, atol=tol, rtol=tol)
