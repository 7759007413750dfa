"""Contiguous pools (first-fit, best-fit, buddy) on hand-built cases whose answers are known."""
from __future__ import annotations

import numpy as np
import pytest

from kvviz.core import metrics
from kvviz.core.admission import Reason
from kvviz.core.config import LaneSpec
from kvviz.engine.kvpool import KVPool
from tests.alloc.invariants import free_lists


def pool(capacity: int, placement: str = "first-fit", cell: int = 1) -> KVPool:
    return KVPool(LaneSpec("contiguous", cell, placement), capacity)


def test_a_pool_is_what_its_lane_spec_names():
    p = KVPool(LaneSpec.parse("paged:16:prefix"), 100)
    assert not p.contiguous and p.prefix_caching and p.label == "paged:16:prefix"
    assert p.usage().capacity_tokens == 96
    c = KVPool(LaneSpec.parse("contiguous:buddy:exact"), 100, label="buddy")
    assert c.contiguous and c.placement == "buddy" and c.label == "buddy"
    assert c.usage().capacity_tokens == 100


def story(a: KVPool) -> None:
    """A, B, C take 30, 20, 30 slots of 100; B finishes: holes of 20 and 20."""
    for sid, n in ((0, 30), (1, 20), (2, 30)):
        assert a.admit(sid, n).ok
    a.release(1)


@pytest.mark.parametrize("placement", ["first-fit", "best-fit"])
def test_request_between_largest_hole_and_free_total_fails_as_fragmentation(placement):
    a = pool(100, placement)
    story(a)
    adm = a.admit(3, 30)
    assert (adm.ok, adm.reason) == (False, Reason.FRAGMENTATION)
    assert (adm.need_tokens, adm.free_tokens, adm.largest_hole_tokens) == (30, 40, 20)


def test_the_same_story_succeeds_under_paging():
    a = KVPool(LaneSpec("paged", 10), 100)
    story(a)
    assert a.admit(3, 30).ok
    assert a.usage().free_tokens == 10


@pytest.mark.parametrize("placement", ["first-fit", "best-fit", "buddy"])
def test_request_above_the_free_total_fails_as_capacity(placement):
    a = pool(128, placement)
    assert a.admit(0, 64).ok and a.admit(1, 32).ok
    adm = a.admit(2, 33)
    assert (adm.ok, adm.reason, adm.free_tokens) == (False, Reason.CAPACITY, 32)


def test_first_fit_and_best_fit_choose_different_holes():
    starts = {}
    for placement in ("first-fit", "best-fit"):
        a = pool(100, placement)
        for sid, n in ((0, 30), (1, 10), (2, 10), (3, 50)):
            assert a.admit(sid, n).ok
        a.release(0)  # hole [0, 30)
        a.release(2)  # hole [40, 50)
        assert a.admit(4, 8).ok
        starts[placement] = int(a.ranges(np.array([4]))[0, 0])
    assert starts == {"first-fit": 0, "best-fit": 40}


def test_ranges_report_first_slot_and_reserved_slots():
    a = pool(100)
    a.admit(7, 10, reserve=25)
    a.admit(9, 5)
    assert a.ranges(np.array([7, 9])).tolist() == [[0, 25], [25, 5]]


def test_growth_in_place_when_the_next_slots_are_free():
    a = pool(20)
    a.admit(0, 4)
    assert a.append(0, 3)
    assert a.ranges(np.array([0])).tolist() == [[0, 7]]
    assert a.seq_len(0) == 7


def test_growth_fails_when_a_neighbour_holds_the_next_slot_and_nothing_changes():
    a = pool(20)
    a.admit(0, 4)
    a.admit(1, 4)
    before = a.snapshot(), a.usage()
    assert a.append(0) is False
    assert (a.snapshot(), a.usage()) == before and a.seq_len(0) == 4


def test_append_within_the_reservation_needs_no_growth():
    a = pool(20)
    a.admit(0, 4, reserve=6)
    a.admit(1, 4)
    assert a.append(0, 2)
    assert not a.append(0)


def test_cells_round_ranges_up_and_leave_tail_waste():
    a = pool(40, cell=4)
    a.admit(0, 5)
    assert a.ranges(np.array([0])).tolist() == [[0, 8]]
    m = metrics.compute(a.snapshot())
    assert (m.used_tokens, m.slack_tokens, m.tail_waste_tokens) == (5, 3, 3)


def test_buddy_rounds_to_a_power_of_two_and_never_grows():
    a = pool(16, "buddy")
    a.admit(0, 3)
    assert a.ranges(np.array([0])).tolist() == [[0, 4]]
    assert a.append(0)  # the 4th slot is inside the buddy block
    assert not a.append(0) and a.seq_len(0) == 4


def test_buddy_splits_keeping_the_lower_half_and_merges_buddies_back():
    a = pool(16, "buddy")
    for sid, n in ((0, 3), (1, 2), (2, 8)):
        assert a.admit(sid, n).ok
    assert a.ranges(np.arange(3)).tolist() == [[0, 4], [4, 2], [8, 8]]
    assert free_lists(a) == [(6, 2)]
    a.release(0)  # its buddy [4, 8) is partly used: no merge
    assert free_lists(a) == [(0, 4), (6, 2)]
    a.release(1)  # [4, 6) + [6, 8) -> [4, 8); + [0, 4) -> [0, 8); [8, 16) used: stop
    assert free_lists(a) == [(0, 8)]
    a.release(2)
    assert free_lists(a) == [(0, 16)]


def test_buddy_aligns_to_the_base_of_its_region_and_never_merges_across_regions():
    a = pool(13, "buddy")  # regions [0, 8), [8, 12), [12, 13)
    assert a.check(1).largest_hole_tokens == 8 and a.check(9).reason is Reason.CAPACITY
    for sid, n in ((0, 4), (1, 1), (2, 1)):
        assert a.admit(sid, n).ok
    assert a.ranges(np.arange(3))[:, 0].tolist() == [8, 12, 0]
    assert free_lists(a) == [(1, 1), (2, 2), (4, 4)]
    for sid in range(3):
        a.release(sid)
    assert free_lists(a) == [(0, 8), (8, 4), (12, 1)]


def test_buddy_largest_hole_in_metrics_matches_what_the_pool_can_place():
    # [0,1] [2,3] [4,5] [6,7] taken; free [2,3] and [4,5]: adjacent, yet not buddies
    a = pool(8, "buddy")
    for sid in range(4):
        a.admit(sid, 2)
    a.release(1)
    a.release(2)
    assert a.check(4).reason is Reason.FRAGMENTATION
    m = metrics.compute(a.snapshot())
    assert m.largest_hole_tokens == a.check(1).largest_hole_tokens == 2
    assert m.external_frag_index == pytest.approx(0.5)


def test_holes_coalesce_with_both_neighbours():
    a = pool(10)
    for sid, n in ((0, 3), (1, 3), (2, 4)):
        assert a.admit(sid, n).ok
    a.release(0)
    a.release(2)
    assert free_lists(a) == [(0, 3), (6, 4)]
    a.release(1)
    assert free_lists(a) == [(0, 10)]


@pytest.mark.parametrize("kw, match", [(dict(reserve=9), "reserve"), (dict(tokens=0), "tokens")])
def test_a_bad_size_raises_value_error(kw, match):
    args = dict(seq=0, tokens=10) | kw
    with pytest.raises(ValueError, match=match):
        pool(100).admit(**args)


def test_admitting_a_live_sequence_raises():
    a = pool(100)
    a.admit(3, 10)
    with pytest.raises(ValueError, match="already live"):
        a.admit(3, 10)


def test_check_answers_like_admit_without_changing_anything():
    a = pool(100)
    story(a)
    before = a.snapshot()
    assert a.check(30) == a.admit(3, 30)
    assert a.check(20).ok
    assert a.snapshot() == before


@pytest.mark.parametrize("capacity, cell", [(3, 4), (0, 1)])
def test_a_capacity_below_one_cell_raises(capacity, cell):
    with pytest.raises(ValueError, match="capacity_tokens"):
        pool(capacity, cell=cell)


def test_snapshot_is_a_copy():
    a = pool(10)
    bm = a.snapshot()
    a.admit(0, 5)
    assert (bm.owner == -1).all()
