"""PagedAllocator without sharing: block supply, block tables, failure reasons."""
from __future__ import annotations

import numpy as np
import pytest

from kvviz.alloc import PagedAllocator, Reason
from kvviz.core import metrics


def test_a_block_is_added_only_when_the_last_one_is_full():
    a = PagedAllocator(8, 4)
    a.admit(0, 3)
    held = [a.usage().allocated_tokens]
    for _ in range(6):
        a.append(0)
        held.append(a.usage().allocated_tokens)
    assert held == [4, 4, 8, 8, 8, 8, 12]  # lengths 3..9


def test_block_size_one_holds_exactly_the_written_slots():
    a = PagedAllocator(10, 1)
    a.admit(0, 5)
    a.append(0, 2)
    m = metrics.compute(a.snapshot())
    assert (m.used_tokens, m.slack_tokens, m.tail_waste_tokens, m.free_tokens) == (7, 0, 0, 3)
    assert a.block_table(0).tolist() == list(range(7))


def test_a_large_block_turns_short_sequences_into_tail_waste_and_capacity_failures():
    a = PagedAllocator(2, 64)
    assert a.admit(0, 1).ok and a.admit(1, 1).ok
    adm = a.admit(2, 1)
    assert (adm.ok, adm.reason, adm.free_tokens) == (False, Reason.CAPACITY, 0)
    m = metrics.compute(a.snapshot())
    assert (m.used_tokens, m.tail_waste_tokens) == (2, 126)


def test_paged_never_reports_fragmentation():
    a = PagedAllocator(10, 1)
    for sid in range(10):
        a.admit(sid, 1)
    for sid in range(0, 10, 2):
        a.release(sid)  # every other block free: five holes of one block
    assert a.admit(20, 5).ok
    assert a.admit(21, 1).reason is Reason.CAPACITY


def test_block_tables_return_what_was_placed():
    a = PagedAllocator(8, 4)
    a.admit(1, 8)
    a.admit(2, 5)
    a.append(1)
    assert a.block_table(1).tolist() == [0, 1, 4]
    assert a.block_tables(np.array([1, 2])).tolist() == [[0, 1, 4], [2, 3, 0]]
    bm = a.snapshot()
    assert bm.owner[:5].tolist() == [1, 1, 2, 2, 1]
    assert bm.filled[:5].tolist() == [4, 4, 4, 1, 1]


def test_reserve_allocates_blocks_up_front_and_fills_only_the_prompt():
    a = PagedAllocator(8, 4)
    a.admit(0, 5, reserve_tokens=12)
    bm = a.snapshot()
    assert bm.filled[:3].tolist() == [4, 1, 0]
    assert a.seq_allocated_tokens(np.array([0])).tolist() == [12]


def test_admit_many_with_reserve_fills_only_the_prompt():
    a = PagedAllocator(8, 4)
    assert a.admit_many(np.array([0]), np.array([5]), np.array([12])) == 1
    assert a.snapshot().filled[:3].tolist() == [4, 1, 0]
    assert a.usage().used_tokens == 5


def test_admit_many_stops_at_the_first_candidate_that_does_not_fit():
    a = PagedAllocator(4, 4)
    k = a.admit_many(np.array([0, 1, 2]), np.array([8, 9, 1]))
    assert k == 1
    assert a.usage().allocated_tokens == 8


def test_admit_many_keeps_the_watermark_free():
    a = PagedAllocator(4, 4)
    assert a.admit_many(np.array([0, 1]), np.array([4, 4]), keep_free_tokens=9) == 1
    assert a.usage().free_tokens == 12


def test_append_batch_gives_memory_to_earlier_sequences_first():
    a = PagedAllocator(3, 2)
    a.admit(0, 2)
    a.admit(1, 2)
    ok = a.append_batch(np.array([1, 0]))
    assert ok.tolist() == [True, False]
    assert (a.seq_len(0), a.seq_len(1)) == (2, 3)


def test_a_failed_append_changes_nothing():
    a = PagedAllocator(2, 2)
    a.admit(0, 4)
    before = a.snapshot(), a.usage()
    adm = a.append(0)
    assert (adm.ok, adm.reason) == (False, Reason.CAPACITY)
    assert (a.snapshot(), a.usage()) == before


def test_reserve_smaller_than_num_tokens_raises_value_error():
    with pytest.raises(ValueError, match="reserve_tokens"):
        PagedAllocator(8, 4).admit(0, 5, reserve_tokens=4)


def test_admitting_a_live_sequence_raises():
    a = PagedAllocator(8, 4)
    a.admit(0, 4)
    with pytest.raises(ValueError, match="already live"):
        a.admit(0, 4)


def test_admitting_a_live_sequence_raises_even_when_memory_is_full():
    a = PagedAllocator(2, 4)
    a.admit(0, 8)
    with pytest.raises(ValueError, match="already live"):
        a.admit(0, 4)


def test_releasing_an_unknown_sequence_raises_key_error():
    a = PagedAllocator(8, 4)
    with pytest.raises(KeyError):
        a.release(3)
    with pytest.raises(KeyError):
        a.release_many(np.array([3]))


def test_release_many_of_nothing_is_a_no_op():
    a = PagedAllocator(8, 4)
    a.admit(0, 4)
    before = a.snapshot()
    a.release_many(np.zeros(0, np.int64))
    assert a.snapshot() == before


@pytest.mark.parametrize("n", [3, 20])  # the few-sequences path and the vectorized one
def test_release_many_frees_every_block(n):
    a = PagedAllocator(64, 2)
    ids = np.arange(n)
    assert a.admit_many(ids, np.full(n, 3)) == n
    a.release_many(ids)
    assert a.usage().allocated_tokens == 0
    assert (a.snapshot().owner == -1).all()


def test_freed_blocks_are_reused():
    a = PagedAllocator(2, 4)
    a.admit(0, 8)
    a.release(0)
    assert a.admit(1, 8).ok


@pytest.mark.parametrize("args", [(0, 4), (4, 0)])
def test_invalid_construction_raises_value_error(args):
    with pytest.raises(ValueError):
        PagedAllocator(*args)


@pytest.mark.parametrize("n", [2, 12])  # the few-sequences path and the vectorized one
def test_a_release_many_that_raises_leaks_no_blocks(n):
    a = PagedAllocator(64, 2)
    a.admit_many(np.arange(n), np.full(n, 3))
    with pytest.raises(KeyError):
        a.release_many(np.r_[np.arange(n), [99]])
    live = [s for s in range(n) if _is_live(a, s)]
    held = int(a.seq_allocated_tokens(np.array(live, np.int64)).sum()) if live else 0
    assert a.usage().allocated_tokens == held


def _is_live(a: PagedAllocator, seq_id: int) -> bool:
    try:
        a.seq_len(seq_id)
    except KeyError:
        return False
    return True


def test_snapshot_fills_blocks_held_ahead_of_the_writes_with_nothing():
    a = PagedAllocator(64, 4)
    assert a.admit(1, 5, reserve_tokens=20).ok  # 5 blocks: one full, one partly, 3 ahead
    assert a.admit(2, 8, reserve_tokens=8).ok  # written to the end of its last block
    assert a.admit(3, 4, reserve_tokens=12).ok  # one full block, two ahead

    def fills(seq: int) -> list[int]:
        return a.snapshot().filled[a.block_table(seq)].tolist()

    assert (fills(1), fills(2), fills(3)) == ([4, 1, 0, 0, 0], [4, 4], [4, 0, 0])
    assert a.append(1, 6).ok  # 11 tokens: into the reserved blocks
    assert a.append(3, 1).ok
    assert (fills(1), fills(3)) == ([4, 4, 3, 0, 0], [4, 1, 0])
    bm = a.snapshot()
    assert (bm.allocated[bm.owner >= 0] == 4).all() and (bm.allocated[bm.owner < 0] == 0).all()
    assert bm.filled.dtype == bm.allocated.dtype == np.int32
