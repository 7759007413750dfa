"""Property-based tests: random op sequences against every pool configuration of the
compiled rule (kvviz/engine/kvpool.py). Each test states one invariant and checks it after
every operation.
"""
from __future__ import annotations

import copy

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from kvviz.core import metrics
from kvviz.core.admission import Admission
from tests.alloc import invariants as inv
from tests.alloc.brute import need_units, placement
from tests.alloc.ops import CHURN, CONFIGS, OPS, Config, Runner
from tests.examples import examples

# No shrinking: a failing run reports its (unshrunk) example at once instead of spending
# minutes minimizing it; the unit tests next to this file carry the minimal repros.
SETTINGS = settings(max_examples=examples(60), deadline=None,
                    phases=(Phase.explicit, Phase.reuse, Phase.generate),
                    suppress_health_check=[HealthCheck.too_slow])
configs = pytest.mark.parametrize("cfg", CONFIGS, ids=str)
FEWER = settings(SETTINGS, max_examples=examples(30))  # the long (CHURN) sequences


def _run(cfg: Config, ops, after, before: bool = False) -> Runner:
    r = Runner(cfg)
    r.run(ops, after, before)
    return r


@configs
@SETTINGS
@given(ops=OPS)
def test_free_plus_allocated_is_capacity_and_usage_matches_snapshot(cfg, ops):
    _run(cfg, ops, lambda r, op, before, res: inv.check_accounting(r.pool))


@configs
@FEWER
@given(ops=OPS | CHURN)
def test_no_slot_owned_twice_and_the_free_lists_are_the_free_memory(cfg, ops):
    _run(cfg, ops, lambda r, op, before, res: inv.check_all(r.pool, r.lens))


@configs
@SETTINGS
@given(ops=OPS)
def test_tail_waste_is_below_one_block_per_sequence(cfg, ops):
    def after(r, op, before, res):
        m = metrics.compute(r.pool.snapshot())
        assert m.tail_waste_tokens < r.pool.block_size * max(1, len(r.lens))

    _run(cfg, ops, after)


@configs
@SETTINGS
@given(ops=OPS)
def test_a_failed_admit_or_append_changes_nothing(cfg, ops):
    def after(r, op, before, res):
        failed = (isinstance(res, Admission) and not res.ok) or res is False
        if isinstance(res, Admission) and not res.ok:
            assert res.reason is not None
        if failed:
            assert inv.state(r.pool) == inv.state(before)

    _run(cfg, ops, after, before=True)


@configs
@SETTINGS
@given(ops=OPS)
def test_append_batch_equals_appending_one_by_one_in_order(cfg, ops):
    def after(r, op, before, res):
        if op[0] != "append_batch":
            return
        ref = copy.deepcopy(before)
        want = [ref.append(s) for s in r.picks(op[1])]  # the live set is the one before
        assert res.tolist() == want
        assert inv.state(r.pool) == inv.state(ref)

    _run(cfg, ops, after, before=True)


@pytest.mark.parametrize("cfg", [c for c in CONFIGS if not c.paged], ids=str)
@FEWER
@given(ops=CHURN)
def test_a_range_lands_where_brute_force_places_it(cfg, ops):
    """First-fit: the first hole by address that holds it; best-fit: the smallest, the
    first of equals; buddy: the lowest free block of the smallest size that holds it."""
    def after(r, op, before, res):
        if op[0] == "admit" and res.ok:
            _, n, ext, _ = op
            units = need_units(before, r.reserve(n, ext) or n)
            start = int(r.pool.ranges([r.next_id - 1])[0, 0]) // before.block_size
            assert start == placement(before, units)

    _run(cfg, ops, after, before=True)


@configs
@SETTINGS
@given(ops=OPS, order=st.lists(st.integers(0, 1000), max_size=10))
def test_releasing_everything_frees_all_memory_and_zeroes_refcounts(cfg, ops, order):
    r = _run(cfg, ops, lambda *a: None)
    r.release_all(order)
    inv.check_empty(r.pool)


def test_configs_cover_every_pool_kind():
    assert {(c.paged, c.prefix) for c in CONFIGS} == {(True, False), (True, True),
                                                     (False, False)}
    assert {c.spec.placement for c in CONFIGS if not c.paged} == {"first-fit", "best-fit",
                                                                  "buddy"}
