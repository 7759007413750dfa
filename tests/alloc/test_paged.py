"""A paged pool without sharing, worked by hand: block supply in vLLM's order, block tables,
refusals, the verbs' errors, arrays that grow."""
from __future__ import annotations

import numpy as np
import pytest

from kvviz.core import metrics
from kvviz.core.admission import Reason
from kvviz.core.config import LaneSpec
from kvviz.engine.kvpool import KVPool


def paged(blocks: int, bs: int) -> KVPool:
    return KVPool(LaneSpec("paged", bs), blocks * bs)


def test_a_block_is_added_only_when_the_last_one_is_full():
    a = paged(8, 4)
    a.admit(0, 3)
    held = [a.usage().allocated_tokens]
    for _ in range(6):
        assert a.append(0)
        held.append(a.usage().allocated_tokens)
    assert held == [4, 4, 8, 8, 8, 8, 12]  # lengths 3..9


def test_block_size_one_holds_exactly_the_written_slots():
    a = paged(10, 1)
    a.admit(0, 5)
    a.append(0, 2)
    m = metrics.compute(a.snapshot())
    assert (m.used_tokens, m.slack_tokens, m.tail_waste_tokens, m.free_tokens) == (7, 0, 0, 3)
    assert a.block_table(0).tolist() == list(range(7))


def test_a_large_block_turns_short_sequences_into_tail_waste_and_capacity_failures():
    a = paged(2, 64)
    assert a.admit(0, 1).ok and a.admit(1, 1).ok
    adm = a.admit(2, 1)
    assert (adm.ok, adm.reason, adm.free_tokens) == (False, Reason.CAPACITY, 0)
    m = metrics.compute(a.snapshot())
    assert (m.used_tokens, m.tail_waste_tokens) == (2, 126)


def test_paged_never_reports_fragmentation():
    a = paged(10, 1)
    for sid in range(10):
        a.admit(sid, 1)
    for sid in range(0, 10, 2):
        a.release(sid)  # every other block free: five holes of one block
    assert a.admit(20, 5).ok
    assert a.admit(21, 1).reason is Reason.CAPACITY


def test_block_tables_return_what_was_placed():
    a = paged(8, 4)
    a.admit(1, 8)
    a.admit(2, 5)
    a.append(1)
    assert a.block_table(1).tolist() == [0, 1, 4]
    assert a.block_tables(np.array([1, 2])).tolist() == [[0, 1, 4], [2, 3, 0]]
    bm = a.snapshot()
    assert bm.owner[:5].tolist() == [1, 1, 2, 2, 1]
    assert bm.filled[:5].tolist() == [4, 4, 4, 1, 1]


def test_freed_blocks_are_taken_again_tail_first_before_untouched_ones():
    """vLLM frees a request's blocks tail first onto the front of the free queue."""
    a = paged(8, 4)
    assert a.admit(0, 12).ok and a.admit(1, 4).ok  # 0: blocks 0, 1, 2; 1: block 3
    a.release(0)
    assert a.admit(2, 16).ok
    assert a.block_table(2).tolist() == [2, 1, 0, 4]


def test_append_batch_gives_memory_to_earlier_sequences_first():
    a = paged(3, 2)
    a.admit(0, 2)
    a.admit(1, 2)
    assert a.append_batch(np.array([1, 0])).tolist() == [True, False]
    assert (a.seq_len(0), a.seq_len(1)) == (2, 3)


def test_a_failed_append_changes_nothing():
    a = paged(2, 2)
    a.admit(0, 4)
    before = a.snapshot(), a.usage()
    assert a.append(0) is False
    assert (a.snapshot(), a.usage()) == before


def test_check_answers_like_admit_without_changing_anything():
    a = paged(4, 4)
    a.admit(0, 5)
    before = a.snapshot()
    assert a.check(5) == a.admit(1, 5)
    assert a.snapshot() != before
    assert a.check(1).reason is Reason.CAPACITY


def test_a_paged_pool_takes_no_reservation():
    with pytest.raises(ValueError, match="reserve"):
        paged(8, 4).admit(0, 5, reserve=8)


@pytest.mark.parametrize("seq, tokens", [(0, 0), (-1, 4)])
def test_a_bad_size_or_sequence_id_raises_and_changes_nothing(seq, tokens):
    a = paged(8, 4)
    before = a.snapshot(), a.usage()
    with pytest.raises(ValueError):
        a.admit(seq, tokens)
    assert (a.snapshot(), a.usage()) == before


def test_admitting_a_live_sequence_raises_even_when_memory_is_full():
    a = paged(2, 4)
    a.admit(0, 8)
    with pytest.raises(ValueError, match="already live"):
        a.admit(0, 4)


def test_verbs_on_an_unknown_sequence_raise_key_error():
    a = paged(8, 4)
    for verb in (a.release, a.append, a.block_table, a.seq_len):
        with pytest.raises(KeyError):
            verb(3)
    a.admit(3, 4)
    a.release(3)
    with pytest.raises(KeyError):
        a.release(3)


def test_a_capacity_below_one_block_raises():
    with pytest.raises(ValueError, match="capacity_tokens"):
        KVPool(LaneSpec("paged", 16), 15)


def test_many_and_long_sequences_outgrow_the_first_arrays_and_keep_their_tables():
    a = paged(400, 2)
    for s in range(40):
        assert a.admit(s, 3).ok
    tables = {s: a.block_table(s).tolist() for s in range(40)}
    assert a.append(7, 200)  # 102 blocks: wider than the first block tables
    assert a.block_table(7).tolist()[:2] == tables[7] and a.seq_len(7) == 203
    assert all(a.block_table(s).tolist() == t for s, t in tables.items() if s != 7)
    assert a.usage().allocated_tokens == 2 * (39 * 2 + 102)
