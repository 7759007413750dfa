"""Vectorized footprints equal footprint_tokens size by size, for every allocator kind."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kvviz.alloc import ContiguousAllocator, PagedAllocator


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(["first-fit", "best-fit", "buddy"]), st.integers(1, 64),
       st.lists(st.integers(1, 2**40), max_size=30))
def test_contiguous_footprints_match_footprint_tokens(placement, cell, sizes):
    a = ContiguousAllocator(4096 * cell, placement, cell_tokens=cell)
    want = [a.footprint_tokens(s) for s in sizes]
    assert a.footprints(np.asarray(sizes, np.int64)).tolist() == want


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 256), st.lists(st.integers(1, 2**40), max_size=30))
def test_paged_footprints_match_footprint_tokens(block, sizes):
    a = PagedAllocator(64, block)
    assert a.footprints(np.asarray(sizes, np.int64)).tolist() == [
        a.footprint_tokens(s) for s in sizes]
