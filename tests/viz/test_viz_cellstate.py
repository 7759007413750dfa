"""kvviz.viz.cellstate: every block gets one state, by the documented precedence."""
from __future__ import annotations

import numpy as np

from kvviz.core.metrics import compute
from kvviz.viz import cellstate as cs
from tests.viz.vizmaps import blockmap


def test_one_block_of_each_state():
    bm = blockmap(owner=[-1, -1, 3, 3, 4, 5, 5],
                  filled=[0, 0, 16, 5, 0, 16, 3],
                  allocated=[0, 0, 16, 16, 16, 16, 16],
                  refcount=[0, 0, 1, 1, 1, 2, 3],
                  cached=[False, True, False, False, False, False, False])
    assert cs.classify(bm).tolist() == [cs.FREE, cs.CACHED, cs.USED, cs.TAIL, cs.RESERVED,
                                        cs.SHARED, cs.SHARED]
    assert cs.classify(bm).dtype == np.int8


def test_classify_a_slice_equals_slicing_the_whole():
    bm = blockmap([-1, 1, 1, 2], [0, 16, 4, 0], [0, 16, 16, 16], [0, 1, 1, 1], [0, 0, 0, 0])
    assert cs.classify(bm, 1, 3).tolist() == cs.classify(bm)[1:3].tolist()


def test_contiguous_reservation_is_reserved_and_written_cells_used(sim_maps):
    bm = sim_maps["contiguous:first-fit:max"]
    state = cs.classify(bm)
    owned = bm.owner != -1
    assert set(np.unique(state[owned])) <= {cs.USED, cs.RESERVED}
    assert (state[owned & (bm.filled == 0)] == cs.RESERVED).all()


def test_states_agree_with_metrics(sim_maps):
    for bm in sim_maps.values():
        state = cs.classify(bm)
        m = compute(bm)
        counts = cs.state_counts(state)
        assert (counts[cs.FREE] + counts[cs.CACHED]) * bm.block_size == m.free_tokens
        partial = (bm.owner != -1) & (bm.filled > 0) & (bm.filled < bm.allocated)
        assert counts[cs.TAIL] == int((partial & (bm.refcount <= 1)).sum())
        assert counts.sum() == bm.num_blocks


def test_prefix_lane_has_shared_blocks(sim_maps):
    state = cs.classify(sim_maps["paged:16:prefix"])
    assert (state == cs.SHARED).any()


def test_run_counts_sum_to_run_length():
    state = np.array([0, 2, 2, 3, 4, 5, 1], np.int8)
    rc = cs.run_counts(state, 3)
    assert rc.shape == (3, cs.NUM_STATES)
    assert rc.sum(axis=1).tolist() == [3, 3, 1]
    assert rc[0].tolist() == [1, 0, 2, 0, 0, 0]
    assert (rc.sum(axis=0) == cs.state_counts(state)).all()
