"""The rebuilt prefix cache: incremental == from scratch, whatever the event order."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kvviz.node.kvevents.decode import CLEARED, REMOVED, STORED, Event
from kvviz.node.kvevents.model import CacheModel, Forest
from kvviz.node.kvevents.rebuild import rebuild
from tests.examples import examples

_h = st.integers(0, 12)
_ev = st.one_of(
    st.builds(lambda hs, p: Event(STORED, hs, p, list(range(4 * len(hs))), 4, None, 0),
              st.lists(_h, min_size=1, max_size=4), st.none() | _h),
    st.builds(lambda hs: Event(REMOVED, hs, None, None, 0, None, 0), st.lists(_h, max_size=4)),
    st.just(Event(CLEARED, [], None, None, 0, None, 0)))


def _consistent(f: Forest) -> None:
    assert f.cached_tokens == sum(f.ntok[h] for h in f.parent)
    kids: dict = {}
    for p in f.parent.values():
        kids[p] = kids.get(p, 0) + 1
    assert f.nkids == kids
    assert set(f.stored_t) == set(f.parent) == set(f.ntok)


@settings(max_examples=examples(60), deadline=None)
@given(st.lists(st.lists(_ev, max_size=5), max_size=12))
def test_incremental_forest_equals_one_rebuilt_from_scratch(batches):
    m = CacheModel()
    for i, b in enumerate(batches):
        m.apply(1, 0, b, float(i))
    f = m.forests.get(next(iter(m.forests), None)) if m.forests else Forest()
    assert f.parent == rebuild(e for b in batches for e in b)
    _consistent(f)
    f.depths()  # terminates, cycles included


def test_removing_unknown_hashes_is_counted_not_fatal():
    m = CacheModel()
    m.apply(1, 0, [Event(REMOVED, [9, 10], None, None, 0, None, 0)], 0.0)
    (f,) = m.forests.values()
    assert f.unknown_removals == 2 and f.removed == 0 and not f.parent


def test_a_store_of_a_cached_hash_is_a_duplicate():
    m = CacheModel()
    ev = Event(STORED, [1, 2], None, list(range(8)), 4, None, 0)
    m.apply(1, 0, [ev, ev], 0.0)
    (f,) = m.forests.values()
    assert f.duplicates == 2 and len(f.parent) == 2 and f.cached_tokens == 8


def test_forests_are_kept_per_rank_medium_and_group():
    m = CacheModel()
    m.apply(1, 0, [Event(STORED, [1], None, None, 4, "GPU", 0),
                   Event(STORED, [1], None, None, 4, "CPU", 0),
                   Event(STORED, [1], None, None, 4, "GPU", 1)], 0.0)
    m.apply(1, 1, [Event(STORED, [1], None, None, 4, "GPU", 0)], 0.0)
    assert len(m.forests) == 4 and m.cached_blocks(1) == 4


def test_divergence_depth_is_where_prompts_branch():
    f = Forest()
    f.store([1, 2, 3], None, None, 4, 0.0)
    f.store([4], 3, None, 4, 0.0)
    f.store([5], 3, None, 4, 0.0)
    assert f.divergence_depths() == [3]


def test_subtree_blocks_count_what_depends_on_a_prefix():
    f = Forest()
    f.store([1, 2, 3], None, None, 4, 0.0)
    f.store([4], 2, None, 4, 0.0)
    assert f.subtree_blocks() == {1: 4, 2: 3, 3: 1, 4: 1}


def test_lifetimes_run_from_store_to_removal():
    f = Forest()
    f.store([1], None, None, 4, 1.0)
    f.remove([1], 3.5)
    assert f.lifetimes == [2.5] and f.evictions[1] == 1


def test_evicted_hash_memory_is_bounded(monkeypatch):
    from kvviz.node.kvevents import model

    monkeypatch.setattr(model, "EVICTIONS_KEPT", 10)
    f = Forest()
    f.store([1], None, None, 4, 0.0)
    for _ in range(3):  # block 1 churns
        f.remove([1], 1.0)
        f.store([1], None, None, 4, 2.0)
    for h in range(100, 130):
        f.store([h], None, None, 4, 0.0)
        f.remove([h], 1.0)
    assert len(f.evictions) <= 11 and f.evictions[1] == 3
