"""PagedKVCache / ContiguousKVCache: layout, dtype, bytes, writes through slot mappings."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from kvviz.core.config import ModelShape, model_preset
from kvviz.kv.cache import ContiguousKVCache, PagedKVCache

MODEL = ModelShape("t", num_layers=2, num_heads=4, num_kv_heads=2, head_dim=8, dtype="float32")


def test_paged_pools_are_nhd_per_layer():
    c = PagedKVCache(5, 4, MODEL)
    assert len(c.k) == len(c.v) == 2
    assert tuple(c.k[0].shape) == (5, 4, 2, 8)
    assert c.k[0].dtype == torch.float32


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16", torch.bfloat16])
def test_dtype_from_argument(dtype):
    c = PagedKVCache(2, 4, MODEL, dtype=dtype)
    assert c.k[1].dtype == (dtype if isinstance(dtype, torch.dtype) else getattr(torch, dtype))


def test_default_dtype_is_the_models():
    assert PagedKVCache(2, 4, model_preset("llama-3-8b")).dtype == torch.bfloat16


def test_nbytes_counts_k_and_v_of_every_layer():
    c = PagedKVCache(5, 4, MODEL, dtype="bfloat16")
    assert c.nbytes == 2 * 2 * 5 * 4 * 2 * 8 * 2
    assert c.bytes_per_token == MODEL.num_layers * 2 * 2 * 8 * 2


def test_write_lands_at_block_and_offset():
    c = PagedKVCache(6, 4, MODEL)
    tables = np.array([[3, 1], [5, 0]], np.int32)
    slots = c.slot_mapping(tables, np.array([5, 2]))
    assert slots.tolist() == [1 * 4 + 1, 5 * 4 + 2]
    k = torch.randn(2, 2, 8)
    v = torch.randn(2, 2, 8)
    c.write(1, torch.from_numpy(slots), k, v)
    assert torch.equal(c.k[1][1, 1], k[0]) and torch.equal(c.v[1][5, 2], v[1])
    assert c.k[0].abs().sum() == 0  # other layers untouched


def test_slot_mapping_with_rows_and_torch_tensors():
    c = PagedKVCache(6, 4, MODEL)
    tables = torch.tensor([[3, 1], [5, 0]], dtype=torch.int32)
    got = c.slot_mapping(tables, torch.tensor([0, 4, 7]), torch.tensor([0, 0, 1]))
    assert got.tolist() == [12, 4, 3] and got.dtype == torch.int64


def test_contiguous_slot_is_start_plus_position():
    c = ContiguousKVCache(20, MODEL)
    assert tuple(c.k[0].shape) == (20, 2, 8)
    slots = c.slot_mapping(np.array([7, 0]), np.array([2, 3]))
    c.write(0, torch.from_numpy(slots), torch.ones(2, 2, 8), torch.ones(2, 2, 8))
    assert c.k[0][9].sum() == 16 and c.k[0][3].sum() == 16


@pytest.mark.parametrize("call, arg", [
    (lambda: PagedKVCache(0, 4, MODEL), "num_blocks"),
    (lambda: PagedKVCache(4, 0, MODEL), "block_size"),
    (lambda: PagedKVCache(4, 4, MODEL, dtype="int8"), "dtype"),
    (lambda: ContiguousKVCache(0, MODEL), "capacity_tokens"),
])
def test_bad_construction_names_the_argument(call, arg):
    with pytest.raises(ValueError, match=arg):
        call()


@pytest.mark.parametrize("layer, slots, kshape, arg", [
    (2, [0], (1, 2, 8), "layer"),
    (0, [24], (1, 2, 8), "slot_mapping"),
    (0, [-1], (1, 2, 8), "slot_mapping"),
    (0, [0], (1, 2, 4), "k"),
])
def test_bad_write_names_the_argument(layer, slots, kshape, arg):
    c = PagedKVCache(6, 4, MODEL)
    with pytest.raises(ValueError, match=arg):
        c.write(layer, torch.tensor(slots), torch.zeros(kshape), torch.zeros(1, 2, 8))
