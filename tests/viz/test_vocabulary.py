"""One vocabulary (kvviz/viz/glossary.py): the legend, the headline numbers and the failure
classes use its names, the sidebar shows it, and the old mixed names are gone."""
from __future__ import annotations

from pathlib import Path

import pytest

from kvviz.viz import glossary, theme
from kvviz.viz import timeseries as vt

ROOT = Path(__file__).resolve().parents[2]
DESIGN_NAMES = ("used", "slack", "reserved", "internal", "free", "cached", "hole",
                "largest hole", "external fragmentation index", "tail waste", "shared savings")
OLD = ("Reserved (slack)", "Ext. frag. index", "Free (hole)", "Cached free",
       "Reserved (will be written)", "square is one slot")


def test_every_design_name_is_defined_once_in_one_line():
    for name in DESIGN_NAMES:
        text = glossary.define(name)
        assert text and "\n" not in text, name
    assert "share of capacity" in glossary.define("tail waste")
    with pytest.raises(KeyError, match="not a glossary term"):
        glossary.define("fragmentation-ish")


def test_the_legend_names_are_glossary_terms():
    for s in theme.STATES:
        assert s.label.lower() in glossary.TERMS, s.label


def test_the_headline_names_are_glossary_terms_and_shares_say_of_capacity():
    row = {"capacity_tokens": 100, "used_tokens": 40, "slack_tokens": 5, "free_tokens": 55,
           "lane": "paged:16:prefix", "prefix_query_tokens": 8, "prefix_hit_tokens": 2}
    for h in vt.headline(row):
        if h.label.startswith(("Failures", "Preemptions", "Tokens")):
            continue
        assert h.label.removesuffix(" (0 for paged)").lower() in glossary.TERMS, h.label
        if h.value.endswith("%") and h.label != "Prefix hit rate":
            assert h.help.startswith("share of capacity"), h.label


def test_the_old_names_are_gone_from_pages_and_figures():
    files = [*ROOT.glob("pages/*.py"), *ROOT.glob("kvviz/viz/*.py"), ROOT / "app.py"]
    for path in files:
        text = path.read_text()
        for old in OLD:
            assert old not in text, f"{path.name}: {old!r}"



def test_paged_lanes_say_their_fragmentation_index_is_0_by_design():
    assert "Paged lanes show 0 by design" in glossary.define("external fragmentation index")
    labels = {vt._frag_headline({"lane": lane}).label for lane in ("paged:16", "paged:8:prefix")}
    assert labels == {"External fragmentation index (0 for paged)"}
    assert vt._frag_headline({"lane": "contiguous:buddy:pow2"}).label == \
        "External fragmentation index"


def test_slack_is_reserved_plus_internal_in_every_split():
    from kvviz.viz import compare as vc
    from kvviz.viz import pressure as vp
    labels = dict(vc.SHARES)
    assert labels["reserved_share"].startswith("Slack: reserved")
    assert labels["internal_share"].startswith("Slack: internal")
    shares = {"used": 0.5, "reserved": 0.1, "internal": 0.15, "free": 0.25}
    text = vp.span_text(vp.SpanShares(10, 0, shares, None))
    assert "slack 25.0% (reserved 10.0%, internal 15.0%)" in text
