"""Failure classes re-derived by brute force from the pool's state.

For every refusal (and every `check` of a few sizes after every operation) the class must be:
CAPACITY when the free total is below what the pool would have to place (its rounded need:
whole cells or blocks, buddy's power of two), FRAGMENTATION when the free total is enough but
no placement exists (every start address tried), and no refusal at all when a placement
exists. The brute force reads only the BlockMap and the pool's configuration.
"""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from kvviz.core.admission import Admission, Reason
from kvviz.core.config import LaneSpec
from kvviz.engine.kvpool import KVPool
from tests.alloc.brute import assert_refusal_is_exact, brute_class, need_units
from tests.alloc.ops import CHURN, CONFIGS, OPS, Config, Runner
from tests.examples import examples

SETTINGS = settings(max_examples=examples(25), deadline=None,
                    phases=(Phase.explicit, Phase.reuse, Phase.generate),
                    suppress_health_check=[HealthCheck.too_slow])
configs = pytest.mark.parametrize("cfg", CONFIGS, ids=str)


sizes = st.lists(st.tuples(st.integers(1, 230), st.integers(0, 40)), min_size=1, max_size=4)


@configs
@SETTINGS
@given(ops=OPS | CHURN, probes=sizes)
def test_check_agrees_with_brute_force_after_every_operation(cfg: Config, ops, probes):
    def after(r, op, before, res):
        for n, ext in probes:
            need = n + ext if not cfg.paged else n
            adm = r.pool.check(n, need if not cfg.paged else None)
            if adm.ok:
                assert brute_class(r.pool, need) is None
            else:
                assert_refusal_is_exact(r.pool, adm, need)

    Runner(cfg).run(ops, after, before=False)


@configs
@SETTINGS
@given(ops=OPS | CHURN)
def test_every_refused_admit_has_the_brute_force_class(cfg: Config, ops):
    def after(r, op, before, res):
        if op[0] != "admit" or not isinstance(res, Admission) or res.ok:
            return
        _, n, ext, _ = op
        need = r.reserve(n, ext) or n
        if cfg.prefix:  # prefix hits only lower what must be placed: still a true shortage
            assert res.reason is Reason.CAPACITY and res.free_tokens < res.need_tokens
            assert res.need_tokens <= need_units(r.pool, need) * r.pool.block_size
        else:
            assert_refusal_is_exact(r.pool, res, need)

    Runner(cfg).run(ops, after, before=False)


def _pool(text: str, capacity: int, cell: int = 1) -> KVPool:
    spec = LaneSpec.parse(text)
    return KVPool(spec if cell == 1 else LaneSpec("contiguous", cell, spec.placement), capacity)


def test_buddy_need_514_with_768_free_and_a_512_hole_is_capacity():
    """The issue's example: buddy must place 1024 slots and only 768 are free."""
    a = _pool("contiguous:buddy", 1024)
    assert a.admit(0, 256).ok and a.admit(1, 256).ok and a.admit(2, 256).ok
    a.release(1)
    a.release(2)  # free: [256, 512) and [512, 1024) -> 768 free, largest block 512
    adm = a.check(514)
    assert (adm.free_tokens, adm.largest_hole_tokens) == (768, 512)
    assert (adm.reason, adm.need_tokens) == (Reason.CAPACITY, 1024)


def test_buddy_with_enough_free_but_no_aligned_block_is_fragmentation():
    a = _pool("contiguous:buddy", 8)
    for s in range(8):
        assert a.admit(s, 1).ok
    a.release(1)
    a.release(2)  # cells 1 and 2 free: 2 free, but no aligned free pair
    adm = a.check(2)
    assert (adm.reason, adm.need_tokens, adm.free_tokens) == (Reason.FRAGMENTATION, 2, 2)


def test_cells_round_the_need_before_comparing_with_the_free_total():
    a = _pool("contiguous:first-fit", 40, cell=4)  # 10 cells
    assert a.admit(0, 28).ok  # 7 cells; 3 cells = 12 slots free
    assert a.check(10).ok  # 10 slots: 3 cells would be enough
    adm = a.check(13)  # 4 cells = 16 slots > 12 free
    assert (adm.reason, adm.need_tokens, adm.free_tokens) == (Reason.CAPACITY, 16, 12)


def test_paged_need_is_whole_blocks():
    a = _pool("paged:16", 64)
    assert a.admit(0, 40).ok  # 3 blocks; 1 block = 16 slots free
    adm = a.check(17)
    assert (adm.reason, adm.need_tokens, adm.free_tokens) == (Reason.CAPACITY, 32, 16)
