"""RealKV: synthetic K/V land where the allocator says; its attention equals SDPA."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from kvviz.core.config import LaneSpec, ModelShape
from kvviz.engine.kvpool import KVPool
from kvviz.kv.real import RealKV
from tests.kv.fakes import FakeContiguous, FakePaged
from tests.kv.kvref import assert_close, reference

MODEL = ModelShape("t", num_layers=2, num_heads=4, num_kv_heads=2, head_dim=16, dtype="float32")
LENS = [5, 17, 33]


def _paged(seed=0, block_size=4, dtype=None):
    alloc = FakePaged(64, block_size, seed=seed)
    kv = RealKV(alloc, MODEL, seed=7, dtype=dtype, backend="torch")
    for s, n in enumerate(LENS):
        alloc.admit(s, n)
    kv.on_admit(list(range(len(LENS))), LENS)
    return alloc, kv


def _gather_paged(kv, alloc, layer, seq, n):
    slots = [int(alloc.block_table(seq)[t // alloc.block_size]) * alloc.block_size
             + t % alloc.block_size for t in range(n)]
    flat_k = kv.cache.k[layer].reshape(-1, MODEL.num_kv_heads, MODEL.head_dim)
    flat_v = kv.cache.v[layer].reshape(-1, MODEL.num_kv_heads, MODEL.head_dim)
    return flat_k[slots], flat_v[slots]


def _decode_all(alloc, kv):
    ids = np.arange(len(LENS))
    for s in ids:
        alloc.append(int(s))
    lens = np.asarray(LENS) + 1
    kv.on_decode(ids, lens)
    return ids, lens


@pytest.mark.parametrize("dtype", [None, "bfloat16"])
def test_paged_attention_equals_sdpa_over_the_gathered_sequence(dtype):
    alloc, kv = _paged(dtype=dtype)
    ids, lens = _decode_all(alloc, kv)
    for layer in range(MODEL.num_layers):
        for b, (s, n) in enumerate(zip(ids, lens)):
            k, v = _gather_paged(kv, alloc, layer, int(s), int(n))
            expected = reference(kv.last_q[layer][b:b + 1], [k], [v])
            assert_close(kv.last_outputs[layer][b:b + 1], expected, kv.dtype)
    assert kv.last_output is kv.last_outputs[-1]


def test_contiguous_attention_equals_sdpa_over_the_range():
    alloc = FakeContiguous(200)
    kv = RealKV(alloc, MODEL, seed=7, backend="torch")
    for s, n in enumerate(LENS):
        alloc.admit(s, n, reserve=n + 4)
    kv.on_admit(list(range(len(LENS))), LENS)
    ids, lens = np.arange(3), np.asarray(LENS) + 1
    kv.on_decode(ids, lens)
    starts = alloc.ranges(ids)[:, 0]
    for layer in range(MODEL.num_layers):
        seq_k = [kv.cache.k[layer][s:s + n] for s, n in zip(starts, lens)]
        seq_v = [kv.cache.v[layer][s:s + n] for s, n in zip(starts, lens)]
        assert_close(kv.last_outputs[layer], reference(kv.last_q[layer], seq_k, seq_v),
                     torch.float32)


def test_kv_content_depends_on_sequence_and_position_not_placement():
    a1, kv1 = _paged(seed=0)
    a2, kv2 = _paged(seed=1)  # same sequences, different blocks
    assert not np.array_equal(a1.block_table(2), a2.block_table(2))
    for layer in range(MODEL.num_layers):
        k1, v1 = _gather_paged(kv1, a1, layer, 2, LENS[2])
        k2, v2 = _gather_paged(kv2, a2, layer, 2, LENS[2])
        assert torch.equal(k1, k2) and torch.equal(v1, v2)
    assert k1.abs().sum() > 0 and not torch.equal(k1[0], k1[1])


def test_seed_changes_the_content():
    a, kv = _paged()
    other = RealKV(a, MODEL, seed=8, backend="torch")
    other.on_admit([0], [LENS[0]])
    assert not torch.equal(_gather_paged(kv, a, 0, 0, 5)[0], _gather_paged(other, a, 0, 0, 5)[0])


def test_bytes_counters():
    alloc, kv = _paged()
    assert kv.pool_bytes == kv.cache.nbytes == 2 * 2 * 64 * 4 * 2 * 16 * 4
    _, lens = _decode_all(alloc, kv)
    per_token = 2 * MODEL.num_layers * MODEL.num_kv_heads * MODEL.head_dim * 4
    assert kv.kv_bytes_read == int(lens.sum()) * per_token
    assert kv.kv_bytes_read_total == kv.kv_bytes_read


def test_decode_past_the_blocks_a_sequence_holds_is_refused():
    _alloc, kv = _paged()  # sequence 0 holds 2 blocks of 4; sequence 2 holds 9
    with pytest.raises(ValueError, match="lens: sequence 0 position 8"):
        kv.on_decode(np.array([0, 2]), np.array([LENS[0] + 4, LENS[2]]))


def test_empty_decode_step_is_a_no_op():
    _, kv = _paged()
    kv.on_decode(np.array([], np.int64), np.array([], np.int64))
    assert kv.last_outputs == [] and kv.kv_bytes_read == 0


def test_with_the_engines_paged_pool():
    alloc = KVPool(LaneSpec("paged", 4), 32 * 4)
    kv = RealKV(alloc, MODEL, backend="torch")
    for s, n in enumerate(LENS):
        assert alloc.admit(s, n).ok
    kv.on_admit([0, 1, 2], LENS)
    assert alloc.append_batch(np.arange(3)).all()
    kv.on_decode(np.arange(3), np.asarray(LENS) + 1)
    k, v = _gather_paged(kv, alloc, 1, 1, LENS[1] + 1)
    assert_close(kv.last_outputs[1][1:2], reference(kv.last_q[1][1:2], [k], [v]), torch.float32)


def test_paged_real_mode_on_cuda_matches_sdpa():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: real mode checked on CPU only")
    alloc = FakePaged(64, 16)
    kv = RealKV(alloc, MODEL, device="cuda", dtype="bfloat16")  # auto: triton when present
    for s, n in enumerate(LENS):
        alloc.admit(s, n)
    kv.on_admit([0, 1, 2], LENS)
    ids, lens = _decode_all(alloc, kv)
    for b, (s, n) in enumerate(zip(ids, lens)):
        k, v = _gather_paged(kv, alloc, 0, int(s), int(n))
        assert_close(kv.last_outputs[0][b:b + 1], reference(kv.last_q[0][b:b + 1], [k], [v]),
                     torch.bfloat16)
