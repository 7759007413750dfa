"""Colours and legend labels shared by every figure and page (one place to change them)."""
from __future__ import annotations

from html import escape
from typing import NamedTuple

from kvviz.viz import cellstate


def text(value: object) -> str:
    """A string from a recording, a node or a stream as plain text in a Plotly figure: Plotly
    renders a subset of HTML in titles, legends, tick labels and hover (<a href> links, <b>,
    <br>), so every '<', '>' and '&' is written as an entity, which Plotly shows as itself."""
    return escape(str(value), quote=False)


class StateStyle(NamedTuple):
    code: int
    name: str
    colour: str
    label: str  # short, for legends and hover
    meaning: str  # one line a newcomer understands


# Labels and meanings use kvviz.viz.glossary's names (one vocabulary on every page).
STATES: tuple[StateStyle, ...] = (
    StateStyle(cellstate.FREE, "free", "#e6e6e6", "Free",
               "no sequence holds it; adjacent free blocks form a hole"),
    StateStyle(cellstate.CACHED, "cached", "#b7e4c7", "Cached",
               "free, but still holds a prefix a new request can reuse"),
    StateStyle(cellstate.USED, "used", "#2b6cb0", "Used",
               "KV written by a live sequence"),
    StateStyle(cellstate.TAIL, "tail", "#f08c2e", "Tail waste",
               "a sequence's last block, partly written: its unwritten slots are tail waste"),
    StateStyle(cellstate.RESERVED, "reserved", "#a9c9ec", "Slack",
               "held by a sequence, nothing written yet"),
    StateStyle(cellstate.SHARED, "shared", "#7b3fb3", "Shared prefix",
               "one block read by several sequences (refcount > 1)"),
)
PAD_COLOUR = "#ffffff"  # grid cells past the end of the map

# Streamlit's light plotly theme, spelled out, for figures the Live page draws every second or
# few with theme=None. Streamlit re-mounts a chart whose spec changed, and with its theme (or
# any template) plotly then draws it again: once for the auto margins, once more when the
# themed copy arrives. A template-free figure with fixed margins is drawn once or twice
# (docs/BENCHMARKS.md).
FONT_FAMILY = '"Source Sans", sans-serif'
FONT = dict(family=FONT_FAMILY, size=12, color="#808495")
TITLE_COLOUR = "#2F2D2B"
GRID_COLOUR = "#e6eaf1"
HOVERLABEL = dict(bgcolor="#FFFFFF", bordercolor="#DCD8D4",
                  font=dict(family=FONT_FAMILY, size=12, color="#808495"))


def plain(fig, margin: dict) -> None:
    """Give a plotly figure Streamlit's look without a template, and fixed margins (no
    auto-margin redraw). Titles and legends must fit inside `margin`."""
    fig.update_layout(template=None, font=FONT, hoverlabel=HOVERLABEL, paper_bgcolor="#ffffff",
                      plot_bgcolor="#ffffff", title_font_color=TITLE_COLOUR,
                      margin=dict(**margin, autoexpand=False))
    axis = dict(gridcolor=GRID_COLOUR, linecolor=GRID_COLOUR, zeroline=False, automargin=False)
    fig.update_xaxes(**axis)
    fig.update_yaxes(**axis)


STATE_COLOURS: tuple[str, ...] = tuple(s.colour for s in STATES) + (PAD_COLOUR,)
STATE_LABELS: tuple[str, ...] = tuple(s.label for s in STATES) + ("past the end",)

FAILURE_COLOURS = {"CAPACITY": "#c0392b", "FRAGMENTATION": "#d4a017", "POLICY": "#7f8c8d"}
FAILURE_MEANING = {  # short forms of kvviz.viz.glossary's definitions
    "CAPACITY": "fewer free slots in total than the rounded need: a true out-of-memory",
    "FRAGMENTATION": "enough free slots in total, but no placement (no hole large enough)",
    "POLICY": "a placement existed, the scheduler refused (watermark, batch limit)",
}
SHARE_COLOURS = {"used": STATES[cellstate.USED].colour,
                 "slack": STATES[cellstate.RESERVED].colour,
                 "free": "#bdbdbd"}
LANE_COLOURS = ("#2b6cb0", "#d1495b", "#2a9d8f", "#6c4ab6", "#e9c46a", "#555555")
DEVICE_COLOURS = {"total": "#555555", "used": "#d1495b", "free": "#2a9d8f",
                  "reserved": "#e9c46a", "process": "#6c4ab6", "torch_allocated": "#2b6cb0",
                  "torch_reserved": "#a9c9ec", "torch_peak": "#7b3fb3", "kv_pool": "#f08c2e",
                  "rss": "#888888"}


def lane_colour(i: int) -> str:
    return LANE_COLOURS[i % len(LANE_COLOURS)]


def legend_html() -> str:
    """One line of coloured squares with their labels; the meaning appears on hover (title)."""
    items = []
    for s in STATES:
        border = "1px solid #999" if s.code in (cellstate.FREE, cellstate.CACHED) else "none"
        items.append(
            f'<span title="{escape(s.meaning)}" style="margin-right:14px;white-space:nowrap">'
            f'<span style="display:inline-block;width:12px;height:12px;background:{s.colour};'
            f'border:{border};vertical-align:middle;margin-right:4px"></span>'
            f"<b>{escape(s.label)}</b>: {escape(s.meaning)}</span>"
        )
    return '<div style="font-size:0.8rem;line-height:1.9">' + " ".join(items) + "</div>"


def _swatch(colour: str, kind: str) -> str:
    if kind == "cross":
        return (f'<span style="color:{colour};font-weight:bold;margin-right:5px;'
                f'vertical-align:middle">&#x2715;</span>')
    if kind == "box":
        return (f'<span style="display:inline-block;width:12px;height:12px;background:'
                f'{colour};vertical-align:middle;margin-right:5px"></span>')
    border = "dashed" if kind == "dash" else "solid"
    return (f'<span style="display:inline-block;width:18px;border-top:2px {border} {colour};'
            f'vertical-align:middle;margin-right:6px"></span>')


def series_legend_html(items: list[tuple[str, str, str]]) -> str:
    """One line of (label, colour, kind) legend entries, kind one of line / dash / box /
    cross: the legend of several charts at once, outside them (kvviz.viz.vegalite)."""
    spans = [f'<span style="margin-right:18px;white-space:nowrap">{_swatch(colour, kind)}'
             f"{escape(label)}</span>" for label, colour, kind in items]
    return ('<div style="font-size:0.8rem;line-height:1.9;color:#555">' + " ".join(spans) +
            "</div>")


def lanes_legend_html(lanes: list[str]) -> str:
    """Each lane's colour (lane_colour) as a short line, and its name."""
    return series_legend_html([(lane, lane_colour(i), "line") for i, lane in enumerate(lanes)])


def headline_html(items: list, min_rem: float = 5.5) -> str:
    """A grid of (label, value, help) headline numbers; help on hover, and each number is
    focusable with the help as its accessible description (st.metric's help icon was
    reachable by keyboard; this keeps that). As many to a row as fit at `min_rem` wide each
    (a narrow lane column wraps to more rows instead of drawing values over each other);
    a value never wraps or is cut.

    One HTML element instead of eight st.metric widgets: the Live page redraws these every
    second in every tab, and the browser's cost grows with the number of elements.
    """
    cells = []
    for label, value, help_ in items:
        cells.append(
            f'<div title="{escape(help_)}" tabindex="0" role="group" '
            f'aria-label="{escape(label)}: {escape(value)}" aria-description="{escape(help_)}" '
            f'style="padding:2px 0;cursor:help;min-width:0">'
            f'<div style="font-size:0.78rem;color:#555;line-height:1.2"><span '
            f'style="border-bottom:1px dotted #999">{escape(label)}</span></div>'
            f'<div style="font-size:1.35rem;line-height:1.3;white-space:nowrap">'
            f'{escape(value)}</div></div>')
    return (f'<div style="display:grid;grid-template-columns:repeat(auto-fill,minmax('
            f'{min_rem}rem,1fr));gap:4px 12px;margin:4px 0 8px">' + "".join(cells) + "</div>")
