"""Failure classes re-derived by brute force from the allocator's state.

For every refusal (and every `check` of a few sizes after every operation) the class must be:
CAPACITY when the free total is below what the allocator would have to place (its rounded
need: whole cells or blocks, buddy's power of two), FRAGMENTATION when the free total is
enough but no placement exists (every start address tried), and no refusal at all when a
placement exists. The brute force reads only the BlockMap and the allocator's configuration.
"""
from __future__ import annotations

import copy

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from kvviz.alloc import ContiguousAllocator, PagedAllocator
from kvviz.alloc.base import Admission, Reason
from tests.alloc.brute import assert_refusal_is_exact, brute_class, need_units
from tests.alloc.ops import CONFIGS, OPS, Config, Runner

SETTINGS = settings(max_examples=40, deadline=None,
                    phases=(Phase.explicit, Phase.reuse, Phase.generate),
                    suppress_health_check=[HealthCheck.too_slow])
configs = pytest.mark.parametrize("cfg", CONFIGS, ids=str)


sizes = st.lists(st.tuples(st.integers(1, 230), st.integers(0, 40)), min_size=1, max_size=4)


@configs
@SETTINGS
@given(ops=OPS, probes=sizes)
def test_check_agrees_with_brute_force_after_every_operation(cfg: Config, ops, probes):
    def after(r, op, before, res):
        for n, ext in probes:
            adm = r.alloc.check(n, n + ext)
            if adm.ok:
                assert brute_class(r.alloc, n + ext) is None
            else:
                assert_refusal_is_exact(r.alloc, adm, n + ext)

    Runner(cfg).run(ops, after)


@configs
@SETTINGS
@given(ops=OPS)
def test_every_refused_admit_has_the_brute_force_class(cfg: Config, ops):
    def after(r, op, before, res):
        if op[0] != "admit" or not isinstance(res, Admission) or res.ok:
            return
        _, n, ext, _ = op
        need = n + (ext or 0)
        if cfg.prefix:  # prefix hits only lower what must be placed: still a true shortage
            assert res.reason is Reason.CAPACITY and res.free_tokens < res.need_tokens
            assert res.need_tokens == need_units(r.alloc, need) * r.alloc.block_size
        else:
            assert_refusal_is_exact(r.alloc, res, need)

    Runner(cfg).run(ops, after)


@configs
@SETTINGS
@given(ops=OPS)
def test_admit_many_reports_the_free_total_after_each_admission(cfg: Config, ops):
    def after(r, op, before, res):
        if op[0] != "admit_many" or op[2] != 0 or not res:
            return
        ref = copy.deepcopy(before)
        cands = op[1]
        first = r.next_id - len(cands)
        any_res = any(c[1] is not None for c in cands)
        want = []
        for i, (n, ext, g) in enumerate(cands[:res]):
            adm = ref.admit(first + i, n, n + (ext or 0) if any_res else None, r._prefix(g))
            want.append(adm.free_tokens)
        again = copy.deepcopy(before)
        out = np.full(len(cands), -1, np.int64)
        ids = np.arange(first, first + len(cands), dtype=np.int64)
        lens = np.array([c[0] for c in cands], np.int64)
        reserve = (np.array([c[0] + (c[1] or 0) for c in cands], np.int64) if any_res
                   else None)
        prefixes = [r._prefix(c[2]) for c in cands] if cfg.prefix else None
        assert again.admit_many(ids, lens, reserve, prefixes, 0, out) == res
        assert out[:res].tolist() == want

    Runner(cfg).run(ops, after)


def test_buddy_need_514_with_768_free_and_a_512_hole_is_capacity():
    """The issue's example: buddy must place 1024 slots and only 768 are free."""
    a = ContiguousAllocator(1024, "buddy")
    assert a.admit(0, 256).ok and a.admit(1, 256).ok and a.admit(2, 256).ok
    a.release(1)
    a.release(2)  # free: [256, 512) and [512, 1024) -> 768 free, largest block 512
    adm = a.check(514)
    assert (adm.free_tokens, adm.largest_hole_tokens) == (768, 512)
    assert (adm.reason, adm.need_tokens) == (Reason.CAPACITY, 1024)


def test_buddy_with_enough_free_but_no_aligned_block_is_fragmentation():
    a = ContiguousAllocator(8, "buddy")
    for s in range(8):
        assert a.admit(s, 1).ok
    a.release(1)
    a.release(2)  # cells 1 and 2 free: 2 free, but no aligned free pair
    adm = a.check(2)
    assert (adm.reason, adm.need_tokens, adm.free_tokens) == (Reason.FRAGMENTATION, 2, 2)


def test_cells_round_the_need_before_comparing_with_the_free_total():
    a = ContiguousAllocator(40, "first-fit", cell_tokens=4)  # 10 cells
    assert a.admit(0, 28).ok  # 7 cells; 3 cells = 12 slots free
    adm = a.check(10)  # 10 slots: 3 cells would be enough
    assert adm.ok
    adm = a.check(13)  # 4 cells = 16 slots > 12 free
    assert (adm.reason, adm.need_tokens, adm.free_tokens) == (Reason.CAPACITY, 16, 12)


def test_paged_need_is_whole_blocks():
    a = PagedAllocator(4, 16)
    assert a.admit(0, 40).ok  # 3 blocks; 1 block = 16 slots free
    adm = a.check(17)
    assert (adm.reason, adm.need_tokens, adm.free_tokens) == (Reason.CAPACITY, 32, 16)
