"""stable_order is argsort(kind="stable") whatever the keys' range (radix or not)."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kvviz.core.order import stable_order


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-(1 << 40), 1 << 40), max_size=300), st.integers(0, 3))
def test_stable_order_equals_a_stable_argsort(keys, spread):
    # squeeze the keys into ranges narrower and wider than 16 bits, ties included
    k = np.asarray(keys, np.int64) % [7, 1 << 16, (1 << 16) + 3, 1 << 41][spread] - 5
    want = np.argsort(k, kind="stable")
    assert np.array_equal(stable_order(k), want)
    if k.size:
        assert np.array_equal(stable_order(k, int(k.min()), int(k.max())), want)


def test_a_16_bit_range_far_from_zero_is_sorted_by_its_offset():
    k = np.array([70_005, 70_000, 70_005, 70_001, 70_000])
    assert stable_order(k, 70_000).tolist() == [1, 4, 3, 0, 2]
    assert stable_order(np.zeros(0, np.int64)).size == 0
