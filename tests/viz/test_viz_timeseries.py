"""kvviz.viz.timeseries: headline numbers, time series and the failure feed."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from kvviz.viz import timeseries as vt


def samples() -> pd.DataFrame:
    rows = []
    for lane, frag in (("contiguous:first-fit:max", 0.5), ("paged:16", 0.0)):
        for i in range(5):
            rows.append(dict(t=i * 0.5, lane=lane, capacity_tokens=1000, used_tokens=100 * i,
                             slack_tokens=50, free_tokens=950 - 100 * i, external_frag_index=frag,
                             largest_hole_tokens=400, admit_failures_capacity=i,
                             admit_failures_fragmentation=2 * i, admit_failures_policy=0,
                             preemptions=1, tokens_per_s=123.4))
    return pd.DataFrame(rows)


def events() -> pd.DataFrame:
    return pd.DataFrame([
        dict(t=1.0, step=1, lane="contiguous:first-fit:max", kind="admit_failed", seq_id=7,
             reason="FRAGMENTATION", need_tokens=500, free_tokens=800, largest_hole_tokens=300,
             count=1),
        dict(t=2.0, step=2, lane="contiguous:first-fit:max", kind="admit_failed", seq_id=8,
             reason="CAPACITY", need_tokens=900, free_tokens=100, largest_hole_tokens=100,
             count=1),
        dict(t=1.5, step=2, lane="paged:16", kind="admitted", seq_id=9, reason=None,
             need_tokens=10, free_tokens=100, largest_hole_tokens=100, count=1),
    ])


def test_headline_reads_the_latest_sample():
    hl = {h.label: h.value for h in vt.headline(samples().iloc[4])}
    assert hl["Used"] == "40%" and hl["Slack"] == "5%" and hl["Free"] == "55%"
    assert hl["Largest hole"] == "400" and hl["External fragmentation index"] == "0.50"
    assert hl["Failures C/F/P"] == "4/8/0" and hl["Tokens/s"] == "123"


def test_headline_survives_missing_columns():
    assert len(vt.headline({"t": 0.0})) == 8


def test_over_time_has_lines_per_lane_and_the_cursor():
    fig = vt.over_time_figure(samples(), ["contiguous:first-fit:max", "paged:16"], mark_t=1.0)
    assert len(fig.data) == 2 * (3 + 3)
    assert any(s["x0"] == 1.0 for s in json.loads(fig.to_json())["layout"]["shapes"])


def test_failure_table_keeps_failures_and_compares_free_with_need():
    tab = vt.failure_table(events())
    assert tab["seq_id"].tolist() == [8, 7]  # newest first
    assert tab["class"].tolist() == ["CAPACITY", "FRAGMENTATION"]
    assert tab["free_covers_need"].tolist() == [False, True]
    assert vt.failure_table(events(), newest_first=False)["seq_id"].tolist() == [7, 8]


def test_failure_table_of_nothing_is_empty():
    assert vt.failure_table(pd.DataFrame()).empty


def test_thin_keeps_the_last_sample_of_each_time_bucket_per_lane():
    t = np.arange(1200) * 0.25  # 5 minutes at 4 Hz
    df = pd.concat([pd.DataFrame({"t": t, "lane": lane, "admit_failures_capacity": np.arange(1200)})
                    for lane in ("a", "b")], ignore_index=True)
    thin = vt.thin(df, 300)
    for lane in ("a", "b"):
        got = thin[thin["lane"] == lane]
        assert len(got) == 300
        assert got["t"].is_monotonic_increasing
        assert got["t"].iloc[-1] == t[-1]  # the newest sample is always kept
        assert got["admit_failures_capacity"].iloc[-1] == 1199  # cumulative counter intact
        assert np.diff(got["t"]).max() <= 1.0 + 1e-9  # no gap wider than a bucket + a sample
    small = df[df["t"] < 10]
    assert vt.thin(small, 300).equals(small)  # fewer rows than points: unchanged
    with pytest.raises(ValueError, match="max_points"):
        vt.thin(df, 0)


def test_headline_html_escapes_and_describes_each_number():
    from kvviz.viz.theme import headline_html
    html = headline_html([("Largest <hole>", "12 tok", 'biggest "run" of free slots')])
    assert "Largest &lt;hole&gt;" in html and "<hole>" not in html
    assert 'tabindex="0"' in html and 'aria-label="Largest &lt;hole&gt;: 12 tok"' in html
    assert 'title="biggest &quot;run&quot; of free slots"' in html
    assert "repeat(auto-fill,minmax(" in html and "white-space:nowrap" in html  # wraps, never cut


def test_live_figures_carry_their_style_and_fixed_margins():
    """The Live and Replay pages draw these with theme=None every second or so: no template and no
    auto-margins, or plotly draws each re-mounted chart two or three times."""
    from kvviz.core.blockmap import empty_blockmap
    from kvviz.viz.heatmap import blockmap_figure

    s = samples()
    figs = [vt.over_time_figure(s, ["paged:16"]), blockmap_figure(empty_blockmap(64, 16))]
    for fig in figs:
        spec = json.loads(fig.to_json())["layout"]
        assert "template" not in spec or spec["template"] in (None, {}), spec.get("template")
        assert spec["font"]["family"].startswith('"Source Sans"')
        for key in (k for k in spec if k.startswith(("xaxis", "yaxis"))):
            assert spec[key].get("automargin") in (None, False), key
    for fig in figs[:1]:
        margin = json.loads(fig.to_json())["layout"]["margin"]
        assert margin["autoexpand"] is False and margin["b"] >= 28


def test_a_prefix_lane_headline_shows_its_hit_rate_and_others_do_not():
    row = {"lane": "paged:16:prefix", "capacity_tokens": 100, "prefix_query_tokens": 400,
           "prefix_hit_tokens": 100}
    items = {h.label: h.value for h in vt.headline(row)}
    assert items["Prefix hit rate"] == "25%"
    assert "Prefix hit rate" not in {h.label for h in vt.headline({**row, "lane": "paged:16"})}
    no_queries = vt.headline({**row, "prefix_query_tokens": 0})
    assert "Prefix hit rate" not in {h.label for h in no_queries}
