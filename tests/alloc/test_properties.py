"""Property-based tests: random op sequences against every allocator configuration.

Each test states one invariant and checks it after every operation.
"""
from __future__ import annotations

import copy

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from kvviz.alloc import ContiguousAllocator, PagedAllocator
from kvviz.alloc.base import Admission
from kvviz.core import metrics
from tests.alloc import invariants as inv
from tests.alloc.ops import CONFIGS, OPS, Config, Runner

# No shrinking: a failing run reports its (unshrunk) example at once instead of spending
# minutes minimizing it; the unit tests next to this file carry the minimal repros.
SETTINGS = settings(max_examples=60, deadline=None,
                    phases=(Phase.explicit, Phase.reuse, Phase.generate),
                    suppress_health_check=[HealthCheck.too_slow])
configs = pytest.mark.parametrize("cfg", CONFIGS, ids=str)


def _run(cfg: Config, ops, after) -> Runner:
    r = Runner(cfg)
    r.run(ops, after)
    return r


@configs
@SETTINGS
@given(ops=OPS)
def test_free_plus_allocated_is_capacity_and_usage_matches_snapshot(cfg, ops):
    _run(cfg, ops, lambda r, op, before, res: inv.check_accounting(r.alloc))


@configs
@SETTINGS
@given(ops=OPS)
def test_no_slot_owned_twice_and_placement_is_consistent(cfg, ops):
    def after(r, op, before, res):
        if cfg.paged:
            inv.check_paged(r.alloc, r.lens)
        else:
            inv.check_contiguous(r.alloc, r.lens)

    _run(cfg, ops, after)


@configs
@SETTINGS
@given(ops=OPS)
def test_tail_waste_is_below_one_block_per_sequence(cfg, ops):
    def after(r, op, before, res):
        m = metrics.compute(r.alloc.snapshot())
        bs = r.alloc.block_size
        assert m.tail_waste_tokens <= sum((-n) % bs for n in r.lens.values())
        assert m.tail_waste_tokens < bs * max(1, len(r.lens))

    _run(cfg, ops, after)


@configs
@SETTINGS
@given(ops=OPS)
def test_a_failed_admit_append_or_fork_changes_nothing(cfg, ops):
    def after(r, op, before, res):
        if isinstance(res, Admission) and not res.ok:
            assert res.reason is not None
            assert inv.state(r.alloc) == inv.state(before)

    _run(cfg, ops, after)


@configs
@SETTINGS
@given(ops=OPS)
def test_append_batch_equals_appending_one_by_one_in_order(cfg, ops):
    def after(r, op, before, res):
        if op[0] != "append_batch":
            return
        ref = copy.deepcopy(before)
        ids = r._picks(op[1])  # append_batch keeps the live set: the same ids as before it
        want = [ref.append(s).ok for s in ids]
        assert res.tolist() == want
        assert inv.state(r.alloc) == inv.state(ref)

    _run(cfg, ops, after)


@configs
@SETTINGS
@given(ops=OPS)
def test_admit_many_equals_admitting_one_by_one_until_the_first_failure(cfg, ops):
    def after(r, op, before, res):
        if op[0] != "admit_many" or op[2] != 0:
            return
        ref = copy.deepcopy(before)
        cands = op[1]
        first = r.next_id - len(cands)
        k = 0
        any_res = any(c[1] is not None for c in cands)
        for i, (n, ext, g) in enumerate(cands):
            reserve = n + (ext or 0) if any_res else None
            if not ref.admit(first + i, n, reserve, r._prefix(g)).ok:
                break
            k += 1
        assert res == k
        assert inv.state(r.alloc) == inv.state(ref)

    _run(cfg, ops, after)


@configs
@SETTINGS
@given(ops=OPS)
def test_admit_many_never_leaves_less_than_the_watermark_free(cfg, ops):
    def after(r, op, before, res):
        if op[0] == "admit_many" and op[2] and res:
            assert r.alloc.usage().free_tokens >= op[2]

    _run(cfg, ops, after)


@configs
@SETTINGS
@given(ops=OPS, order=st.lists(st.integers(0, 1000), max_size=10))
def test_releasing_everything_frees_all_memory_and_zeroes_refcounts(cfg, ops, order):
    r = _run(cfg, ops, lambda *a: None)
    r.release_all(order)
    inv.check_empty(r.alloc)


def test_configs_cover_every_allocator_kind():
    kinds = {type(c.make()).__name__ for c in CONFIGS}
    places = {c.make().placement for c in CONFIGS if not c.paged}
    assert kinds == {PagedAllocator.__name__, ContiguousAllocator.__name__}
    assert places == {"first-fit", "best-fit", "buddy"}
