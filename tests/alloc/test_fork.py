"""fork: a child shares its parent's blocks; copy-on-write on a shared, written block."""
from __future__ import annotations

import pytest

from kvviz.alloc import PagedAllocator, Reason
from kvviz.core import metrics


def forked(n: int = 6, reserve: int | None = None, blocks: int = 8) -> PagedAllocator:
    a = PagedAllocator(blocks, 4)
    a.admit(1, n, reserve)
    assert a.fork(1, 2).ok
    return a


def test_fork_shares_every_block_and_costs_nothing():
    a = forked()
    assert a.block_table(2).tolist() == a.block_table(1).tolist() == [0, 1]
    assert a.seq_len(2) == 6
    assert a.snapshot().refcount[:2].tolist() == [2, 2]
    u = a.usage()
    assert (u.used_tokens, u.allocated_tokens) == (6, 8)
    assert metrics.compute(a.snapshot()).shared_savings_tokens == 6


def test_append_to_a_shared_partial_block_copies_it():
    a = forked()
    assert a.append(2).ok
    assert a.block_table(2).tolist() == [0, 2]
    assert a.block_table(1).tolist() == [0, 1]
    bm = a.snapshot()
    assert bm.filled[:3].tolist() == [4, 2, 3]
    assert bm.refcount[:3].tolist() == [2, 1, 1]
    assert a.usage().used_tokens == 9


def test_the_parent_copies_too_when_it_writes_first():
    a = forked()
    a.append(1)
    assert a.block_table(1).tolist() == [0, 2]
    assert a.block_table(2).tolist() == [0, 1]
    assert a.snapshot().owner[1] == 2


def test_no_copy_when_the_shared_last_block_is_full():
    a = forked(n=8)
    a.append(2)
    assert a.block_table(2).tolist() == [0, 1, 2]
    assert a.snapshot().refcount[:3].tolist() == [2, 2, 1]


def test_a_shared_reserved_block_is_copied_before_either_sequence_writes_into_it():
    a = forked(n=4, reserve=8)  # block 1 is reserved, unwritten, shared
    a.append(1)
    a.append(2)
    t1, t2 = a.block_table(1).tolist(), a.block_table(2).tolist()
    assert t1[1] != t2[1]
    assert a.snapshot().filled[[t1[1], t2[1]]].tolist() == [1, 1]


def test_copy_on_write_fails_as_capacity_and_changes_nothing_when_memory_is_full():
    a = forked(blocks=2)
    before = a.snapshot(), a.usage()
    adm = a.append(2)
    assert (adm.ok, adm.reason) == (False, Reason.CAPACITY)
    assert (a.snapshot(), a.usage()) == before


def test_releasing_the_parent_hands_shared_blocks_to_the_child():
    a = forked()
    a.release(1)
    bm = a.snapshot()
    assert bm.owner[:2].tolist() == [2, 2]
    assert bm.refcount[:2].tolist() == [1, 1]
    assert a.usage().used_tokens == 6


def test_releasing_both_frees_everything():
    a = forked()
    a.append(2)
    a.release(2)
    a.release(1)
    bm = a.snapshot()
    assert (bm.owner == -1).all() and (bm.refcount == 0).all()
    assert a.usage().allocated_tokens == 0 and a.usage().used_tokens == 0


def test_fork_of_an_unknown_parent_raises_key_error():
    with pytest.raises(KeyError):
        PagedAllocator(4, 4).fork(1, 2)


def test_fork_onto_a_live_child_raises():
    a = forked()
    with pytest.raises(ValueError):
        a.fork(1, 2)
