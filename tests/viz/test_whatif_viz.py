"""The What if? curves: one line per configuration in each panel, the baseline first and
thicker, blocks in use as a share of each configuration's own pool."""
from __future__ import annotations

import numpy as np

from kvviz.viz.whatif import Curve, curves_figure


def test_each_configuration_draws_its_share_of_its_own_pool():
    step = np.array([1, 5, 9], np.int64)
    base = Curve("node's own", step, np.array([10, 50, 100]), np.array([0, 1, 3]), 100)
    half = Curve("blocks 51", step, np.array([10, 50, 50]), np.array([0, 4, 9]), 50)
    fig = curves_figure([base, half])
    blocks = [t for t in fig.data if t.xaxis == "x"]
    preempt = [t for t in fig.data if t.xaxis == "x2"]
    assert [t.name for t in blocks] == ["node's own", "blocks 51"]
    assert np.allclose(blocks[1].y, [0.2, 1.0, 1.0]) and list(blocks[1].customdata) == [10, 50, 50]
    assert list(preempt[1].y) == [0, 4, 9]
    assert blocks[0].line.width > blocks[1].line.width
    assert not any(t.showlegend for t in preempt)  # one legend entry per configuration
