"""Numba backend (CPU, reads blocks in place) vs per-sequence SDPA on gathered K/V."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from kvviz.kv import (
    attention_numba,
    contiguous_decode_attention,
    get_backend,
    paged_decode_attention,
)
from tests.kv.kvref import assert_close, contiguous_case, paged_case

pytest.importorskip("numba")
RAGGED = [1, 17, 130, 5, 64, 16, 33]  # one token, partial and exactly full last blocks, > TILE


@pytest.mark.parametrize("block_size", [1, 3, 16, 128])
@pytest.mark.parametrize("heads, kv_heads", [(4, 4), (8, 2)])
def test_paged_matches_reference(block_size, heads, kv_heads):
    # pad=-7: table columns past a sequence's used blocks are garbage the kernel must not read
    c = paged_case(RAGGED, heads, kv_heads, 32, block_size, seed=block_size, pad=-7)
    out = paged_decode_attention(c.q, c.k, c.v, c.index, c.lens, backend="numba")
    assert out.shape == c.q.shape and out.dtype == torch.float32
    assert_close(out, c.expected(), torch.float32)


@pytest.mark.parametrize("prefetch", [True, False])
def test_prefetching_does_not_change_the_result(prefetch, monkeypatch):
    monkeypatch.setattr(attention_numba, "PREFETCH_BLOCK_BYTES", 1 << 40 if prefetch else 0)
    c = paged_case(RAGGED, 8, 2, 16, 2, seed=5)
    out = paged_decode_attention(c.q, c.k, c.v, c.index, c.lens, scale=0.3, backend="numba",
                                 check_values=False)
    assert_close(out, c.expected(scale=0.3), torch.float32)


@pytest.mark.parametrize("gaps", [True, False])
@pytest.mark.parametrize("heads, kv_heads", [(4, 4), (8, 2)])
def test_contiguous_matches_reference(gaps, heads, kv_heads):
    c = contiguous_case(RAGGED, heads, kv_heads, 32, gaps=gaps)
    out = contiguous_decode_attention(c.q, c.k, c.v, c.index, c.lens, backend="numba")
    assert_close(out, c.expected(), torch.float32)


def test_strided_caches_are_read_as_they_lie():
    c = paged_case(RAGGED, 4, 2, 16, 4, seed=2)
    wide_k = torch.zeros(*c.k.shape[:-1], 40)
    wide_v = torch.zeros_like(wide_k)
    wide_k[..., 3:19], wide_v[..., 3:19] = c.k, c.v  # head_dim not at the start of a row
    q = torch.zeros(c.q.shape[0], c.q.shape[1], 24)[..., 4:20]
    q.copy_(c.q)
    out = paged_decode_attention(q, wide_k[..., 3:19], wide_v[..., 3:19], c.index, c.lens,
                                 backend="numba")
    assert_close(out, c.expected(), torch.float32)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_16_bit_caches_are_answered_by_the_torch_path(dtype):
    c = paged_case(RAGGED, 8, 2, 32, 4, dtype=dtype)
    out = paged_decode_attention(c.q, c.k, c.v, c.index, c.lens, backend="numba")
    assert out.dtype == dtype
    assert_close(out, c.expected(), dtype)


def test_auto_is_numba_on_cpu_and_numba_refuses_cuda():
    assert get_backend("auto", "cpu").name == "numba"
    with pytest.raises(ValueError, match="backend: 'numba' cannot run on cuda"):
        get_backend("numba", "cuda")


@pytest.mark.parametrize("threads", [2, 3])
def test_ranges_over_threads_give_the_same_answer(threads, monkeypatch):
    monkeypatch.setattr(attention_numba, "MIN_TOKENS", 1)  # every thread gets a range
    monkeypatch.setattr(torch, "get_num_threads", lambda: threads)
    c = paged_case(RAGGED, 8, 2, 16, 4, seed=threads)
    out = paged_decode_attention(c.q, c.k, c.v, c.index, c.lens, backend="numba")
    assert_close(out, c.expected(), torch.float32)


@pytest.mark.parametrize("lens, threads, cuts", [
    ([5000, 5000, 5000, 5000], 2, [0, 2, 4]), ([9000, 100, 100, 100], 2, [0, 1, 4]),
    ([100] * 8, 2, [0, 8]), ([3000, 3000, 3000], 8, [0, 2, 3]), ([8192], 4, [0, 1]),
])
def test_sequences_split_into_ranges_of_about_equal_tokens(lens, threads, cuts):
    assert attention_numba._split(np.array(lens, np.int64), threads) == cuts
