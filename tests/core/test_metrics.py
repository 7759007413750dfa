"""Metrics on hand-built BlockMaps whose answers are known."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from kvviz.core import metrics
from kvviz.core.blockmap import BlockMap, empty_blockmap

F = -1


def bmap(owner, filled, bs=1, *, allocated=None, refcount=None, cached=None,
         contiguous=True) -> BlockMap:
    owner = np.asarray(owner, np.int32)
    held = owner != F
    return BlockMap(
        owner=owner,
        filled=np.asarray(filled, np.int32),
        allocated=np.asarray(allocated if allocated is not None else np.where(held, bs, 0)),
        refcount=np.asarray(refcount if refcount is not None else held.astype(np.int16)),
        cached=np.asarray(cached if cached is not None else np.zeros(owner.size, bool)),
        block_size=bs, bytes_per_token=2, label="t", contiguous=contiguous,
    )


# slot-exact contiguous: seq 1 writes 2 of 3, seq 2 writes 2 of 2; holes of 2 and 3
LINE = dict(owner=[1, 1, 1, F, F, 2, 2, F, F, F], filled=[1, 1, 0, 0, 0, 1, 1, 0, 0, 0])


def test_used_slack_free_sum_to_capacity():
    m = metrics.compute(bmap(**LINE))
    assert (m.used_tokens, m.slack_tokens, m.free_tokens) == (4, 1, 5)
    assert m.used_tokens + m.slack_tokens + m.free_tokens == m.capacity_tokens == 10


def test_holes_count_sizes_and_largest():
    bm = bmap(**LINE)
    assert metrics.hole_sizes(bm).tolist() == [2, 3]
    assert metrics.hole_starts(bm).tolist() == [3, 7]
    m = metrics.compute(bm)
    assert (m.hole_count, m.largest_hole_tokens) == (2, 3)


def test_hole_sizes_are_in_slots():
    bm = bmap([F, F, 1, F], [0, 0, 3, 0], bs=4)
    assert metrics.hole_sizes(bm).tolist() == [8, 4]


def test_hole_histogram_buckets_by_power_of_two():
    bm = bmap([F, 1, F, F, F, 1, F, F, F, F, F], [0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0])
    lo, counts = metrics.hole_histogram(bm, max_pow2=4)
    assert lo.tolist() == [1, 2, 4, 8, 16]
    assert counts.tolist() == [1, 1, 1, 0, 0]  # holes of 1, 3, 5


def test_external_fragmentation_index_contiguous():
    assert metrics.compute(bmap(**LINE)).external_frag_index == pytest.approx(1 - 3 / 5)


def test_external_fragmentation_index_is_zero_for_paged():
    assert metrics.compute(bmap(**LINE, contiguous=False)).external_frag_index == 0.0


def test_external_fragmentation_index_is_zero_with_one_hole_or_none():
    assert metrics.compute(bmap([1, 1, F, F], [1, 1, 0, 0])).external_frag_index == 0.0
    m = metrics.compute(bmap([1, 2], [1, 1]))
    assert (m.external_frag_index, m.hole_count, m.largest_hole_tokens) == (0.0, 0, 0)


def test_tail_waste_counts_unwritten_slots_of_partly_written_blocks_only():
    # seq 1: blocks of 4 with 4 + 2 written; seq 2: 1 written + one reserved, unwritten block
    bm = bmap([1, 1, 2, 2, F], [4, 2, 1, 0, 0], bs=4, contiguous=False)
    assert metrics.compute(bm).tail_waste_tokens == 2 + 3


def test_shared_savings_count_each_extra_reference():
    bm = bmap([1, 1, 2], [4, 4, 3], bs=4, refcount=[3, 2, 1], contiguous=False)
    m = metrics.compute(bm)
    assert m.shared_savings_tokens == 2 * 4 + 1 * 4
    assert m.used_tokens == 11


def test_cached_blocks_are_free_and_counted_as_cached_not_used():
    bm = bmap([1, F, F], [4, 4, 0], bs=4, cached=[False, True, False], contiguous=False)
    m = metrics.compute(bm)
    assert (m.used_tokens, m.free_tokens, m.cached_tokens) == (4, 8, 4)


def test_live_sequences_count_distinct_owners():
    assert metrics.compute(bmap(**LINE)).live_sequences == 2
    assert metrics.compute(empty_blockmap(4, 2)).live_sequences == 0


def test_slack_split_needs_final_lengths():
    m = metrics.compute(bmap(**LINE))
    assert m.reserved_tokens is None and m.internal_tokens is None


def test_reserved_and_internal_split_with_final_lengths():
    # reservation 2048 slots in cells of 16, 100 written, final length 300
    cells = 2048 // 16
    filled = np.clip(100 - np.arange(cells) * 16, 0, 16)
    bm = replace(bmap(np.r_[np.full(cells, 7), [F, F]], np.r_[filled, [0, 0]], bs=16),
                 final_seq=np.array([7], np.int32), final_len=np.array([300], np.int32))
    m = metrics.compute(bm)
    assert (m.used_tokens, m.slack_tokens) == (100, 1948)
    assert (m.reserved_tokens, m.internal_tokens) == (200, 1748)
    assert m.used_tokens + m.reserved_tokens + m.internal_tokens + m.free_tokens == 2048 + 32


def test_a_sequence_past_its_final_length_has_no_reserved_slack():
    bm = replace(bmap([3, 3, 3, 3], [1, 1, 0, 0]),
                 final_seq=np.array([3], np.int32), final_len=np.array([2], np.int32))
    m = metrics.compute(bm)
    assert (m.reserved_tokens, m.internal_tokens) == (0, 2)


def test_empty_map_is_all_free():
    m = metrics.compute(empty_blockmap(8, 4, contiguous=True))
    assert (m.free_tokens, m.hole_count, m.largest_hole_tokens, m.used_tokens) == (32, 1, 32, 0)
    assert m.share(m.free_tokens) == 1.0


def test_blockmap_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match="filled"):
        bmap([1, 1], [1])


def test_blockmap_needs_final_seq_and_final_len_together():
    with pytest.raises(ValueError, match="final"):
        replace(bmap([1], [1]), final_seq=np.array([1], np.int32))


def test_blockmap_rejects_block_size_zero():
    with pytest.raises(ValueError, match="block_size"):
        empty_blockmap(4, 0)


def test_blockmap_coerces_dtypes():
    bm = bmap([1, F], [1, 0])
    assert (bm.owner.dtype, bm.refcount.dtype, bm.cached.dtype) == (
        np.int32, np.int16, np.bool_)


def test_blockmap_equality_compares_contents():
    assert bmap(**LINE) == bmap(**LINE)
    assert bmap(**LINE) != bmap(**LINE, contiguous=False)


@pytest.mark.parametrize("shift", [10**8, 2**31 - 1000])
def test_metrics_do_not_depend_on_how_large_owner_ids_are(shift):
    # Under --loop ids keep growing; metrics must equal those of the same map with small ids.
    owner = np.array([3, 3, F, 5, 5, 5, F, 9, F, 3])
    small = bmap(owner, [1, 1, 0, 1, 1, 0, 0, 1, 0, 0], allocated=[1] * 2 + [0] + [1] * 3
                 + [0, 1, 0, 1])
    small = replace(small, final_seq=np.array([3, 5, 9]), final_len=np.array([2, 3, 1]))
    big = replace(small, owner=np.where(owner == F, F, owner - 3 + shift).astype(np.int32),
                  final_seq=small.final_seq - 3 + shift)
    assert metrics.compute(big) == metrics.compute(small)


def test_dense_ids_are_bounded_by_the_number_of_ids_for_sparse_ids():
    (a, b), n = metrics.dense_ids(np.array([7, 2**31 - 2, 7]), np.array([2**31 - 2, 0]))
    assert n == 3
    assert a[0] == a[2] and a[1] == b[0] and len({a[0], a[1], b[1]}) == 3
