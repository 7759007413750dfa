"""ContiguousAllocator on hand-built cases whose answers are known."""
from __future__ import annotations

import numpy as np
import pytest

from kvviz.alloc import ContiguousAllocator, PagedAllocator, Reason
from kvviz.core import metrics


def story(alloc) -> None:
    """A, B, C take 30, 20, 30 slots of 100; B finishes: holes of 20 and 20."""
    for sid, n in ((0, 30), (1, 20), (2, 30)):
        assert alloc.admit(sid, n).ok
    alloc.release(1)


@pytest.mark.parametrize("placement", ["first-fit", "best-fit"])
def test_request_between_largest_hole_and_free_total_fails_as_fragmentation(placement):
    a = ContiguousAllocator(100, placement)
    story(a)
    adm = a.admit(3, 30)
    assert (adm.ok, adm.reason) == (False, Reason.FRAGMENTATION)
    assert (adm.need_tokens, adm.free_tokens, adm.largest_hole_tokens) == (30, 40, 20)


def test_the_same_story_succeeds_under_paging():
    a = PagedAllocator(10, 10)
    story(a)
    assert a.admit(3, 30).ok
    assert a.usage().free_tokens == 10


@pytest.mark.parametrize("placement", ["first-fit", "best-fit", "buddy"])
def test_request_above_the_free_total_fails_as_capacity(placement):
    a = ContiguousAllocator(128, placement)
    assert a.admit(0, 64).ok and a.admit(1, 32).ok
    adm = a.admit(2, 33)
    assert (adm.ok, adm.reason, adm.free_tokens) == (False, Reason.CAPACITY, 32)


def test_paged_reports_capacity_when_the_free_total_is_short():
    a = PagedAllocator(10, 10)
    story(a)
    adm = a.admit(3, 50)
    assert (adm.ok, adm.reason, adm.free_tokens) == (False, Reason.CAPACITY, 40)


def test_first_fit_and_best_fit_choose_different_holes():
    starts = {}
    for placement in ("first-fit", "best-fit"):
        a = ContiguousAllocator(100, placement)
        for sid, n in ((0, 30), (1, 10), (2, 10), (3, 50)):
            assert a.admit(sid, n).ok
        a.release(0)  # hole [0, 30)
        a.release(2)  # hole [40, 50)
        assert a.admit(4, 8).ok
        starts[placement] = int(a.ranges(np.array([4]))[0, 0])
    assert starts == {"first-fit": 0, "best-fit": 40}


def test_ranges_report_first_slot_and_reserved_slots():
    a = ContiguousAllocator(100)
    a.admit(7, 10, reserve_tokens=25)
    a.admit(9, 5)
    assert a.ranges(np.array([7, 9])).tolist() == [[0, 25], [25, 5]]


def test_growth_in_place_when_the_next_slots_are_free():
    a = ContiguousAllocator(20)
    a.admit(0, 4)
    adm = a.append(0, 3)
    assert adm.ok
    assert a.ranges(np.array([0])).tolist() == [[0, 7]]
    assert a.seq_len(0) == 7


def test_growth_fails_when_a_neighbour_holds_the_next_slot_and_nothing_changes():
    a = ContiguousAllocator(20)
    a.admit(0, 4)
    a.admit(1, 4)
    before = a.snapshot(), a.usage()
    adm = a.append(0)
    assert (adm.ok, adm.reason) == (False, Reason.FRAGMENTATION)
    assert (a.snapshot(), a.usage()) == before
    assert a.seq_len(0) == 4


def test_growth_fails_as_capacity_when_memory_is_full():
    a = ContiguousAllocator(8)
    a.admit(0, 4)
    a.admit(1, 4)
    assert a.append(1).reason is Reason.CAPACITY


def test_append_within_the_reservation_needs_no_growth():
    a = ContiguousAllocator(20)
    a.admit(0, 4, reserve_tokens=6)
    a.admit(1, 4)
    assert a.append(0, 2).ok
    assert not a.append(0).ok


def test_cells_round_ranges_up_and_leave_tail_waste():
    a = ContiguousAllocator(40, cell_tokens=4)
    a.admit(0, 5)
    assert a.ranges(np.array([0])).tolist() == [[0, 8]]
    m = metrics.compute(a.snapshot())
    assert (m.used_tokens, m.slack_tokens, m.tail_waste_tokens) == (5, 3, 3)


def test_buddy_rounds_to_a_power_of_two_and_never_grows():
    a = ContiguousAllocator(16, "buddy")
    a.admit(0, 3)
    assert a.ranges(np.array([0])).tolist() == [[0, 4]]
    assert a.append(0).ok  # the 4th slot is inside the buddy block
    adm = a.append(0)
    assert not adm.ok and a.seq_len(0) == 4
    assert adm.reason is Reason.FRAGMENTATION  # 12 slots free, none adjacent in this block


def test_buddy_largest_hole_in_metrics_matches_what_the_allocator_can_place():
    # [0,1] [2,3] [4,5] [6,7] taken; free [2,3] and [4,5]: adjacent, yet not buddies
    a = ContiguousAllocator(8, "buddy")
    for sid in range(4):
        a.admit(sid, 2)
    a.release(1)
    a.release(2)
    assert a.check(4).reason is Reason.FRAGMENTATION
    m = metrics.compute(a.snapshot())
    assert m.largest_hole_tokens == a.check(1).largest_hole_tokens == 2
    assert m.external_frag_index == pytest.approx(0.5)


def test_reserve_smaller_than_num_tokens_raises_value_error():
    with pytest.raises(ValueError, match="reserve_tokens"):
        ContiguousAllocator(100).admit(0, 10, reserve_tokens=9)


def test_zero_tokens_raise_value_error():
    with pytest.raises(ValueError, match="num_tokens"):
        ContiguousAllocator(100).admit(0, 0)


def test_admitting_a_live_sequence_raises():
    a = ContiguousAllocator(100)
    a.admit(3, 10)
    with pytest.raises(ValueError, match="already live"):
        a.admit(3, 10)


def test_admitting_a_negative_sequence_id_raises_and_changes_nothing():
    a = ContiguousAllocator(16)
    before = a.snapshot(), a.usage(), a.check(16)
    with pytest.raises(ValueError):
        a.admit(-1, 4)
    assert (a.snapshot(), a.usage(), a.check(16)) == before


def test_releasing_an_unknown_sequence_raises_key_error():
    a = ContiguousAllocator(100)
    with pytest.raises(KeyError):
        a.release(5)
    a.admit(5, 3)
    a.release(5)
    with pytest.raises(KeyError):
        a.release(5)


def test_appending_to_an_unknown_sequence_raises_key_error():
    with pytest.raises(KeyError):
        ContiguousAllocator(100).append(1)


def test_fork_is_not_supported():
    a = ContiguousAllocator(100)
    a.admit(0, 4)
    with pytest.raises(NotImplementedError):
        a.fork(0, 1)


def test_check_answers_like_admit_without_changing_anything():
    a = ContiguousAllocator(100)
    story(a)
    before = a.snapshot()
    assert a.check(30) == a.admit(3, 30)
    assert a.check(20).ok
    assert a.snapshot() == before


@pytest.mark.parametrize("bad", [dict(placement="worst-fit"), dict(cell_tokens=0),
                                 dict(capacity_tokens=3, cell_tokens=4)])
def test_invalid_construction_raises_value_error(bad):
    kw = dict(capacity_tokens=100, placement="first-fit") | bad
    cap = kw.pop("capacity_tokens")
    with pytest.raises(ValueError):
        ContiguousAllocator(cap, **kw)


def test_snapshot_is_a_copy():
    a = ContiguousAllocator(10)
    bm = a.snapshot()
    a.admit(0, 5)
    assert (bm.owner == -1).all()


def test_admit_many_keeps_the_watermark_counting_the_rounded_range():
    a = ContiguousAllocator(16, "buddy")  # 5 tokens take a buddy block of 8
    k = a.admit_many(np.array([0]), np.array([5]), np.array([5]), keep_free_tokens=10)
    assert k == 0 or a.usage().free_tokens >= 10
