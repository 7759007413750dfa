"""kvviz.viz.kvevents: pure builders over a rebuilt forest."""
from __future__ import annotations

import random

from kvviz.node.kvevents import diagnose
from kvviz.node.kvevents.decode import STORED, Event
from kvviz.node.kvevents.model import CacheModel, Forest
from kvviz.viz import kvevents as vk


def _random_forest(n: int, seed: int = 0) -> Forest:
    rng = random.Random(seed)
    f = Forest()
    f.store([0], None, None, 16, 0.0)
    for h in range(1, n):
        f.store([h], rng.randrange(h) if rng.random() < 0.9 else None, None, 16, float(h))
    return f


def test_a_truncated_forest_table_keeps_every_kept_blocks_ancestors():
    df = vk.forest_table(_random_forest(500), now=600.0, max_nodes=50)
    ids = set(df["id"])
    assert len(df) == 50 and all(p == "" or p in ids for p in df["parent"])


def test_icicle_values_never_exceed_their_parent():
    df = vk.forest_table(_random_forest(300, 1), now=400.0)
    fig = vk.forest_figure(df)
    tr = fig.data[0]
    val = dict(zip(tr.ids, tr.values))
    kids: dict = {}
    for i, p in zip(tr.ids, tr.parents):
        if p:
            kids[p] = kids.get(p, 0) + val[i]
    assert all(val[p] >= s for p, s in kids.items())


def test_overlap_is_the_share_of_a_streams_blocks_another_holds():
    m = CacheModel()
    m.apply(1, 0, [Event(STORED, [1, 2, 3, 4], None, None, 4, None, 0)], 0.0)
    m.apply(2, 0, [Event(STORED, [1, 2], None, None, 4, None, 0)], 0.0)
    assert diagnose.overlap(m, [1, 2]) == [[1.0, 0.5], [1.0, 1.0]]
    fig = vk.overlap_figure(["a", "b"], diagnose.overlap(m, [1, 2]))
    assert fig.data[0].type == "heatmap"


def test_an_empty_forest_draws_an_empty_figure():
    assert not vk.forest_figure(vk.forest_table(Forest(), 0.0)).data


def test_the_timeline_has_a_panel_per_stream_and_folds_the_rest():
    rows = [(sid, s, 3, 1) for sid in range(1, 12) for s in range(3)]
    fig = vk.timeline_figure(rows, {}, max_rows=4)
    assert len(fig.data) == 8  # stored + evicted per panel
    assert fig.layout.annotations[-1].text == "8 more streams"
    assert list(fig.data[-2].y) == [24, 24, 24]  # 8 streams x 3 blocks


def test_the_colour_scale_starts_at_0_even_when_no_block_was_evicted():
    """Plotly centres a flat scale on its value (-0.4..0.4 for all zeros): a count of
    evictions or an age below 0 means nothing."""
    df = vk.forest_table(_random_forest(20, 2), now=30.0)
    for colour in ("evictions", "age_s"):
        m = vk.forest_figure(df, colour).data[0].marker
        assert m.cmin == 0 and m.cmax >= max(1.0, float(df[colour].max()))
