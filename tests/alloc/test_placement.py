"""Placement policies in cells: HoleList (first/best fit) and Buddy, worked by hand."""
from __future__ import annotations

from kvviz.alloc.placement import Buddy, HoleList


def test_buddy_splits_keeping_the_lower_half():
    b = Buddy(16)
    assert b.place(3) == 0  # 16 -> 8 + 8 -> 4 + 4: takes [0, 4)
    assert sorted(b.free_blocks()) == [(4, 4), (8, 8)]
    assert b.place(2) == 4  # splits [4, 8) into [4, 6) and [6, 8)
    assert b.place(8) == 8
    assert sorted(b.free_blocks()) == [(6, 2)]
    assert b.free_cells == 2


def test_buddy_coalesces_freed_buddies_back_to_the_region():
    b = Buddy(16)
    b.place(3), b.place(2), b.place(8)
    b.free(0, 3)  # its buddy [4, 8) is partly used: no merge
    assert sorted(b.free_blocks()) == [(0, 4), (6, 2)]
    b.free(4, 2)  # [4,6)+[6,8) -> [4,8); + [0,4) -> [0,8); [8,16) used: stop
    assert sorted(b.free_blocks()) == [(0, 8)]
    b.free(8, 8)
    assert b.free_blocks() == [(0, 16)]
    assert b.free_cells == 16


def test_buddy_regions_of_an_odd_capacity_are_its_binary_decomposition():
    b = Buddy(13)
    assert b.regions == [(0, 3), (8, 2), (12, 0)]
    assert b.largest() == 8 and b.free_cells == 13


def test_buddy_alignment_is_relative_to_the_region_base():
    b = Buddy(13)
    assert b.place(4) == 8  # the exact-size block of region (8, order 2)
    assert b.place(1) == 12
    assert b.place(1) == 0  # splits region 0: frees [1], [2, 4), [4, 8)
    assert sorted(b.free_blocks()) == [(1, 1), (2, 2), (4, 4)]


def test_buddy_never_merges_across_regions():
    b = Buddy(12)  # regions [0, 8) and [8, 12)
    b.free(b.place(8), 8)
    assert sorted(b.free_blocks()) == [(0, 8), (8, 4)]


def test_buddy_refuses_a_request_larger_than_every_region():
    b = Buddy(12)
    assert b.place(9) is None
    assert b.free_cells == 12


def test_buddy_rounding():
    b = Buddy(32)
    assert [b.rounded(n) for n in (1, 2, 3, 4, 5, 8, 9)] == [1, 2, 4, 4, 8, 8, 16]


def test_hole_list_coalesces_with_both_neighbours():
    h = HoleList(10)
    assert [h.place(3), h.place(3), h.place(4)] == [0, 3, 6]
    h.free(0, 3)
    h.free(6, 4)
    assert (h.starts.tolist(), h.sizes.tolist()) == ([0, 6], [3, 4])
    h.free(3, 3)
    assert (h.starts.tolist(), h.sizes.tolist()) == ([0], [10])


def test_best_fit_picks_the_smallest_sufficient_hole():
    h = HoleList(20, best_fit=True)
    for n in (5, 1, 3, 1, 10):
        h.place(n)
    h.free(0, 5)
    h.free(6, 3)
    assert h.place(3) == 6


def test_hole_list_grows_only_into_an_adjacent_hole():
    h = HoleList(10)
    h.place(4), h.place(2)
    h.free(4, 2)
    assert h.grow(0, 4, 6)
    assert not h.grow(0, 10, 1)
