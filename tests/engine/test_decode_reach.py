"""PagedSpace.span's reach in closed form (kvspace.decode_reach) against counting the new
blocks step by step."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kvviz.engine.kvspace import decode_reach


def _brute(lens: np.ndarray, bs: int, budget: int, m: int) -> int:
    """The most steps j <= m whose decodes open <= budget blocks, one step at a time."""
    held = -(-lens // bs)
    for j in range(1, m + 1):
        if int((-(-(lens + j) // bs) - held).sum()) > budget:
            return j - 1
    return m


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 700), min_size=1, max_size=12),
       st.sampled_from([1, 2, 3, 16, 64, 256]), st.integers(-3, 120), st.integers(0, 900))
def test_decode_reach_counts_the_blocks_the_steps_open(lens, bs, budget, m):
    lens = np.asarray(lens, np.int64)
    assert min(m, decode_reach(lens, bs, budget)) == _brute(lens, bs, budget, m)


def test_decode_reach_examples():
    lens = np.array([16, 5, 31])  # bs 16: they open blocks at steps 1, 12, 2, then every 16
    assert decode_reach(lens, 16, 0) == 0
    assert decode_reach(lens, 16, 1) == 1
    assert decode_reach(lens, 16, 2) == 11
    assert decode_reach(lens, 16, 3) == 16
    assert decode_reach(lens, 16, -1) == 0
