"""Torch backend vs per-sequence SDPA on gathered K/V: paged and contiguous layouts."""
from __future__ import annotations

import pytest
import torch

from kvviz.kv import contiguous_decode_attention, paged_decode_attention
from kvviz.kv.attention_torch import BACKEND
from tests.kv.kvref import assert_close, contiguous_case, paged_case, reference

RAGGED = [1, 17, 130, 5, 64, 16]  # a single token, partial and exactly full last blocks


@pytest.mark.parametrize("block_size", [1, 16, 128])
@pytest.mark.parametrize("heads, kv_heads", [(4, 4), (8, 2)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_paged_matches_reference(block_size, heads, kv_heads, dtype):
    c = paged_case(RAGGED, heads, kv_heads, 32, block_size, dtype, seed=block_size)
    out = paged_decode_attention(c.q, c.k, c.v, c.index, c.lens, backend="torch")
    assert out.shape == c.q.shape and out.dtype == dtype
    assert_close(out, c.expected(), dtype)


@pytest.mark.parametrize("chunk_bytes", [1, 40_000, None])
def test_paged_chunking_does_not_change_the_result(chunk_bytes, monkeypatch):
    monkeypatch.setattr(BACKEND, "chunk_bytes", chunk_bytes)
    c = paged_case(RAGGED, 8, 2, 16, 4, pad=-7)  # garbage past the used blocks is ignored
    out = paged_decode_attention(c.q, c.k, c.v, c.index, c.lens, backend="torch")
    assert_close(out, c.expected(), torch.float32)


def test_paged_in_block_order_and_custom_scale():
    c = paged_case([9, 3], 2, 1, 8, 4, shuffle=False)
    out = paged_decode_attention(c.q, c.k, c.v, c.index, c.lens, scale=0.05, backend="torch")
    assert_close(out, c.expected(scale=0.05), torch.float32)


def test_unchecked_call_gives_the_same_answer():
    c = paged_case(RAGGED, 4, 2, 16, 8)
    out = paged_decode_attention(c.q, c.k, c.v, c.index, c.lens, backend="torch",
                                 check_values=False)
    assert_close(out, c.expected(), torch.float32)


@pytest.mark.parametrize("gaps", [True, False])
@pytest.mark.parametrize("heads, kv_heads", [(4, 4), (8, 2)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_contiguous_matches_reference(gaps, heads, kv_heads, dtype):
    c = contiguous_case(RAGGED, heads, kv_heads, 32, dtype, gaps=gaps)
    out = contiguous_decode_attention(c.q, c.k, c.v, c.index, c.lens, backend="torch")
    assert_close(out, c.expected(), dtype)


@pytest.mark.parametrize("starts", [[2, 14, 26], [5, 5, 5], [30, 15, 0]])
def test_contiguous_ranges_evenly_spaced_or_not(starts):
    g = torch.Generator().manual_seed(1)
    k, v = torch.randn(2, 40, 2, 16, generator=g)
    q = torch.randn(3, 4, 16, generator=g)
    lens = [7, 10, 3]
    out = contiguous_decode_attention(q, k, v, torch.tensor(starts), torch.tensor(
        lens, dtype=torch.int32), backend="torch")
    expected = reference(q, [k[s:s + n] for s, n in zip(starts, lens)],
                         [v[s:s + n] for s, n in zip(starts, lens)])
    assert_close(out, expected, torch.float32)


def test_auto_answers_on_cpu():
    c = paged_case([5, 9], 4, 2, 16, 4)
    out = paged_decode_attention(c.q, c.k, c.v, c.index, c.lens)
    assert_close(out, c.expected(), torch.float32)


def test_empty_batch_returns_empty():
    c = paged_case([5], 4, 2, 16, 4)
    out = paged_decode_attention(c.q[:0], c.k, c.v, c.index[:0], c.lens[:0], backend="torch")
    assert out.shape == (0, 4, 16)
