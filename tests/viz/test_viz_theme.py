"""kvviz.viz.theme: one colour and one newcomer label per state."""
from __future__ import annotations

from kvviz.viz import cellstate as cs
from kvviz.viz import theme


def test_every_state_has_a_distinct_colour_in_code_order():
    assert [s.code for s in theme.STATES] == list(range(cs.NUM_STATES))
    assert len(set(theme.STATE_COLOURS)) == len(theme.STATE_COLOURS) == cs.NUM_STATES + 1


def test_legend_names_and_explains_every_state():
    html = theme.legend_html()
    for s in theme.STATES:
        assert s.label in html and s.colour in html


def test_failure_classes_have_colours_and_meanings():
    assert set(theme.FAILURE_COLOURS) == set(theme.FAILURE_MEANING) == {
        "CAPACITY", "FRAGMENTATION", "POLICY"}
