"""grow_many(ids, k) leaves an allocator exactly as k calls of append_batch(ids) do."""
from __future__ import annotations

import dataclasses

import numpy as np
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from kvviz.alloc import ContiguousAllocator, PagedAllocator


def _same_maps(a, b) -> bool:
    return all(np.array_equal(getattr(a, f.name), getattr(b, f.name))
               if isinstance(getattr(a, f.name), np.ndarray)
               else getattr(a, f.name) == getattr(b, f.name) for f in dataclasses.fields(a))


def _fill(alloc, lens: list[int], extra: list[int]) -> np.ndarray:
    ids = []
    for i, (n, e) in enumerate(zip(lens, extra)):
        if alloc.admit(i, n, n + e if e else None).ok:
            ids.append(i)
    return np.array(ids, np.int64)


@settings(max_examples=50, deadline=None)
@given(st.sampled_from(["paged:1", "paged:16", "paged:64", "first-fit", "buddy"]),
       st.lists(st.integers(1, 200), min_size=1, max_size=12),
       st.lists(st.sampled_from([0, 0, 5, 40]), min_size=12, max_size=12),
       st.integers(1, 150))
def test_grow_many_equals_repeated_append_batch(kind, lens, extra, steps):
    def make():
        if kind.startswith("paged"):
            return PagedAllocator(4096 // int(kind[6:]) + 64, int(kind[6:]))
        return ContiguousAllocator(8192, kind)

    a, b, scratch = make(), make(), make()
    ids = _fill(a, lens, extra)
    _fill(b, lens, extra)
    _fill(scratch, lens, extra)
    assume(all(scratch.append_batch(ids).all() for _ in range(steps)))  # the caller's check
    for _ in range(steps):
        b.append_batch(ids)
    a.grow_many(ids, steps)
    assert a.usage() == b.usage()
    assert _same_maps(a.snapshot(), b.snapshot())
