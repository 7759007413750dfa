"""kvviz.viz.vegalite: the Live page's history charts, data apart from a data-free spec."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd

from kvviz.viz import theme
from kvviz.viz import timeseries as vt
from kvviz.viz import vegalite as vl
from tests.viz.test_viz_timeseries import events, samples

LANES = ["contiguous:first-fit:max", "paged:16"]


def later(df: pd.DataFrame) -> pd.DataFrame:
    """Other numbers, same columns: what the next history tick sees."""
    out = df.copy()
    out["t"] += 100.0
    out["used_tokens"] = out["used_tokens"] // 2
    out["largest_hole_tokens"] += 7
    return out


def all_charts(s: pd.DataFrame, e: pd.DataFrame) -> list[tuple[pd.DataFrame, dict]]:
    return [*(vl.shares_chart(s, lane) for lane in LANES), *vl.over_time_charts(s, LANES),
            *(vl.failures_chart(s, e, lane) for lane in LANES)]


def test_specs_do_not_depend_on_the_data():
    """The point of these builders: Streamlit swaps the data of a mounted Vega-Lite chart
    whose spec is unchanged, instead of re-mounting it (plotly charts are re-mounted)."""
    now, nxt = all_charts(samples(), events()), all_charts(later(samples()), events().iloc[:1])
    assert len(now) == 2 + 4 + 2
    for (d1, s1), (d2, s2) in zip(now, nxt):
        assert json.dumps(s1, sort_keys=True) == json.dumps(s2, sort_keys=True)
        assert not d1.equals(d2)
        assert "data" not in s1 and "datasets" not in s1  # the data travels apart


def test_shares_stack_to_capacity_per_time():
    data, spec = vl.shares_chart(samples(), "paged:16")
    assert spec["title"]["text"] == "paged:16: used / slack / free"
    assert sorted(data["series"].unique()) == sorted(vl.SHARES)
    total = data.groupby("t")["share"].sum()
    assert np.allclose(total.to_numpy(), 1.0) and len(total) == 5
    used = data[data["series"] == "used"]["share"].to_numpy()
    assert np.allclose(used, np.arange(5) * 100 / 1000)


def test_over_time_charts_carry_each_lane_and_failure_class():
    charts = vl.over_time_charts(samples(), LANES)
    titles = [spec["title"]["text"] for _, spec in charts]
    assert titles == [p[0] for p in vl.PANELS]
    frag, _ = charts[0]
    got = frag.groupby("lane")["value"].first().to_dict()
    assert got == {"contiguous:first-fit:max": 0.5, "paged:16": 0.0}
    assert charts[0][1]["encoding"]["y"]["scale"]["domain"] == [0, 1.02]
    fails, spec = charts[2]
    one = fails[(fails["lane"] == LANES[0]) & (fails["class"] == "FRAGMENTATION")]
    assert one["value"].tolist() == [0, 2, 4, 6, 8]
    assert spec["encoding"]["strokeDash"]["scale"]["domain"] == list(vt.FAILURE_CLASSES)
    colours = charts[1][1]["encoding"]["color"]["scale"]
    assert colours == {"domain": LANES, "range": [theme.lane_colour(0), theme.lane_colour(1)]}


def test_failures_chart_marks_each_failure_at_its_need():
    data, spec = vl.failures_chart(samples(), events(), LANES[0])
    marks = data[data["series"].str.endswith(" failure")]
    assert marks[["t", "series", "value"]].values.tolist() == [
        [2.0, "CAPACITY failure", 900.0], [1.0, "FRAGMENTATION failure", 500.0]]
    lines = data[~data["series"].str.endswith(" failure")]
    assert len(lines) == 2 * 5 and set(lines["series"]) == set(vl.HISTORY_SERIES)
    assert vl.failures_chart(samples(), events(), LANES[1])[0]["series"].str.endswith(
        " failure").sum() == 0  # the other lane's failures are not drawn here


def test_empty_history_gives_empty_data_and_the_same_spec():
    empty = samples().iloc[:0]
    for (data, spec), (_, full) in zip(all_charts(empty, events().iloc[:0]),
                                       all_charts(samples(), events())):
        assert data.empty and spec == full


def test_failure_markers_have_tooltips_and_legends_are_html():
    _, spec = vl.failures_chart(samples(), events(), LANES[0])
    marks = spec["layer"][1]
    assert marks["mark"]["shape"] == "cross"
    assert [f["field"] for f in marks["encoding"]["tooltip"]] == ["series", "value", "t"]
    html = vl.failures_legend_html() + vl.shares_legend_html() + theme.lanes_legend_html(
        ["a<b"])
    for label in (*vl.HISTORY_SERIES, *vl.FAILURE_SERIES, *vl.SHARES, "a&lt;b"):
        assert label in html
