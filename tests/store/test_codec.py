"""rle-zlib-1 block map encoding: decode(encode(bm)) == bm, for any map."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kvviz.blockmap import BlockMap, empty_blockmap
from kvviz.store_codec import decode, encode


def roundtrip(bm: BlockMap) -> BlockMap:
    e = encode(bm)
    return decode(e.num_blocks, e.runs, e.layout, e.blobs, block_size=bm.block_size,
                  bytes_per_token=bm.bytes_per_token, label=bm.label, contiguous=bm.contiguous)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 300), st.integers(0, 2**31 - 2), st.integers(1, 300), st.booleans(),
       st.integers(0, 2**32 - 1))
def test_roundtrip_any_map(n: int, max_owner: int, bs: int, finals: bool, seed: int) -> None:
    rng = np.random.default_rng(seed)
    owner = rng.integers(-1, max_owner + 1, n).astype(np.int32)
    owner[rng.random(n) < 0.3] = -1
    fs = np.unique(owner[owner >= 0]).astype(np.int32)
    bm = BlockMap(owner, rng.integers(0, bs + 1, n).astype(np.int32),
                  rng.integers(0, bs + 1, n).astype(np.int32),
                  rng.integers(-5, 2**15 - 1, n).astype(np.int16), rng.random(n) < 0.2,
                  bs, 7, "paged:x", bool(seed % 2),
                  final_seq=fs if finals else None,
                  final_len=(fs * 3).astype(np.int32) if finals else None)
    out = roundtrip(bm)
    assert out == bm
    if finals:
        assert np.array_equal(out.final_seq, bm.final_seq)
        assert np.array_equal(out.final_len, bm.final_len)
    else:
        assert out.final_seq is None and out.final_len is None


def test_free_map_is_tiny() -> None:
    e = encode(empty_blockmap(1 << 20, 16))
    assert e.runs == 1 and e.nbytes < 200


def test_dtypes_restored() -> None:
    out = roundtrip(empty_blockmap(10, 4))
    assert (out.owner.dtype, out.refcount.dtype, out.cached.dtype) == (
        np.int32, np.int16, np.bool_)
