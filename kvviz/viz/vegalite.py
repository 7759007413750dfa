"""The Live page's history charts as Vega-Lite specs, each with its data apart.

Why not plotly here (the heatmaps, Compare, Replay and GPU stay plotly): Streamlit 1.67 gives
a plotly chart an element id made of its spec, so every 5-s history tick would re-mount all
five charts, plotly would draw each from scratch in every tab and the server would build and
validate the figures again (cost: docs/BENCHMARKS.md, decision log). A
`st.vega_lite_chart` without `on_select` has no spec-derived id: while its spec stays the
same, Streamlit swaps the data into the mounted view. So every spec below depends only on
the lane names, never on the data, which goes in the returned frame (long format).

Each builder returns (data, spec) for `st.vega_lite_chart(data, spec, theme=None)`: the
charts carry the light look of kvviz.viz.theme themselves. Only the failure markers have a
hover tooltip: a nearest-point hover layer (a point per datum plus a Voronoi diagram that
Vega recomputes at every data update) costs more than the plotly charts it replaces
(docs/BENCHMARKS.md, decision log).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from kvviz.viz import theme
from kvviz.viz import timeseries as vt

SHARES = ("used", "slack", "free")
# (title, sample column or None for the three failure counters, y axis format, fixed domain)
PANELS = (
    ("External fragmentation index", "external_frag_index", ".1f", [0, 1.02]),
    ("Largest hole (slots)", "largest_hole_tokens", "~s", None),
    ("Admission failures (cumulative)", None, "~s", None),
    ("Tokens/s", "tokens_per_s", "~s", None),
)
DASHES = {"CAPACITY": [1, 0], "FRAGMENTATION": [6, 4], "POLICY": [2, 2]}
HISTORY_SERIES = ("free total", "largest hole")
FAILURE_SERIES = tuple(f"{c} failure" for c in vt.FAILURE_CLASSES)
FAILURE_CHART_COLOURS = (theme.SHARE_COLOURS["free"], "#333333",
                         *[theme.FAILURE_COLOURS[c] for c in vt.FAILURE_CLASSES])


def _axis(**kw) -> dict:
    return dict(gridColor=theme.GRID_COLOUR, domainColor=theme.GRID_COLOUR,
                tickColor=theme.GRID_COLOUR, labelColor=theme.FONT["color"],
                titleColor=theme.FONT["color"], labelFont=theme.FONT_FAMILY,
                titleFont=theme.FONT_FAMILY, titleFontWeight="normal", labelFontSize=11, **kw)


def _title(text: str, subtitle: str | None = None) -> dict:
    out = dict(text=text, anchor="start", fontSize=13, fontWeight="normal",
               color=theme.TITLE_COLOUR, font=theme.FONT_FAMILY)
    if subtitle:
        out.update(subtitle=subtitle, subtitleFontSize=10, subtitleColor=theme.FONT["color"],
                   subtitleFont=theme.FONT_FAMILY)
    return out


def _spec(height: int, title: dict, layers: list[dict], encoding: dict) -> dict:
    return {"width": "container", "height": height, "title": title,
            "config": {"view": {"stroke": None}, "background": "#ffffff"},
            "encoding": encoding, "layer": layers}


T_ENC = {"field": "t", "type": "quantitative", "title": None,
         "axis": _axis(tickCount=6), "scale": {"zero": False, "nice": False}}
T_TIP = {"field": "t", "type": "quantitative", "title": "t (s)", "format": ".1f"}


def shares_chart(samples: pd.DataFrame, lane: str) -> tuple[pd.DataFrame, dict]:
    """Stacked used / slack / free share of capacity over time, one lane."""
    df = vt.lane_rows(samples, lane)
    t = vt.numeric(df, "t")
    cap = np.maximum(1.0, vt.numeric(df, "capacity_tokens"))
    data = pd.concat([pd.DataFrame({"t": t, "series": k, "order": i,
                                    "share": vt.numeric(df, f"{k}_tokens") / cap})
                      for i, k in enumerate(SHARES)], ignore_index=True)
    colour = {"field": "series", "type": "nominal", "sort": list(SHARES), "legend": None,
              "scale": {"domain": list(SHARES), "range": [theme.SHARE_COLOURS[k] for k in SHARES]}}
    enc = {"x": T_ENC,
           "y": {"field": "share", "type": "quantitative", "stack": "zero", "title": None,
                 "scale": {"domain": [0, 1]}, "axis": _axis(format=".0%", tickCount=4)},
           "order": {"field": "order"}, "color": colour}
    layers = [{"mark": {"type": "area", "line": {"strokeWidth": 0.5}}}]
    return data, _spec(160, _title(f"{lane}: used / slack / free"), layers, enc)


def shares_legend_html() -> str:
    return theme.series_legend_html([(k, theme.SHARE_COLOURS[k], "box") for k in SHARES])


def over_time_charts(samples: pd.DataFrame,
                     lanes: list[str]) -> list[tuple[pd.DataFrame, dict]]:
    """Four charts, one line per lane (colours: theme.lane_colour, the legend is
    theme.lanes_legend_html): external fragmentation index, largest hole, admission failures
    by class (solid CAPACITY, dashed FRAGMENTATION, dotted POLICY), tokens/s."""
    colour = {"field": "lane", "type": "nominal", "sort": list(lanes), "legend": None,
              "scale": {"domain": list(lanes),
                        "range": [theme.lane_colour(i) for i in range(len(lanes))]}}
    out = []
    for title, col, fmt, domain in PANELS:
        parts = []
        for lane in lanes:
            df = vt.lane_rows(samples, lane)
            cols = ([("-", col)] if col else
                    [(c, vt.FAILURE_COLUMNS[c]) for c in vt.FAILURE_CLASSES])
            parts += [pd.DataFrame({"t": vt.numeric(df, "t"), "lane": lane, "class": cls,
                                    "value": vt.numeric(df, c)}) for cls, c in cols]
        data = (pd.concat(parts, ignore_index=True) if parts else
                pd.DataFrame({"t": [], "lane": [], "class": [], "value": []}))
        enc = {"x": T_ENC, "color": colour,
               "y": {"field": "value", "type": "quantitative", "title": None,
                     "axis": _axis(format=fmt, tickCount=4),
                     "scale": {"domain": domain} if domain else {"zero": True}}}
        subtitle = None
        if col is None:
            enc["strokeDash"] = {"field": "class", "type": "nominal", "legend": None,
                                 "scale": {"domain": list(vt.FAILURE_CLASSES),
                                           "range": [DASHES[c] for c in vt.FAILURE_CLASSES]}}
            subtitle = "solid CAPACITY · dashed FRAGMENTATION · dotted POLICY"
        layers = [{"mark": {"type": "line", "strokeWidth": 1.5}}]
        out.append((data, _spec(150, _title(title, subtitle), layers, enc)))
    return out


def failures_chart(samples: pd.DataFrame, events: pd.DataFrame,
                   lane: str) -> tuple[pd.DataFrame, dict]:
    """One lane: free total and largest hole over time; each admission failure a cross at
    the slots it needed, coloured by class. A FRAGMENTATION failure sits between the lines:
    the free total covers it, no hole does."""
    df = vt.lane_rows(samples, lane)
    t = vt.numeric(df, "t")
    fails = vt.failure_table(events)
    fails = fails[fails["lane"] == lane]
    data = pd.concat([
        pd.DataFrame({"t": t, "series": HISTORY_SERIES[0],
                      "value": vt.numeric(df, "free_tokens")}),
        pd.DataFrame({"t": t, "series": HISTORY_SERIES[1],
                      "value": vt.numeric(df, "largest_hole_tokens")}),
        pd.DataFrame({"t": vt.numeric(fails, "t"), "series": fails["class"].astype(str) +
                      " failure", "value": vt.numeric(fails, "need_tokens")})],
        ignore_index=True)
    series = [*HISTORY_SERIES, *FAILURE_SERIES]
    enc = {"x": T_ENC,
           "y": {"field": "value", "type": "quantitative", "title": "slots",
                 "axis": _axis(format="~s", tickCount=4)},
           "color": {"field": "series", "type": "nominal", "sort": series,
                     "scale": {"domain": series, "range": FAILURE_CHART_COLOURS},
                     "legend": None}}
    is_line = "indexof(datum.series, ' failure') < 0"
    tip = [{"field": "series", "title": "failure"},
           {"field": "value", "title": "needed slots", "format": ",.0f"}, T_TIP]
    layers = [
        {"transform": [{"filter": is_line}], "mark": {"type": "line"},
         "encoding": {"strokeDash": {"field": "series", "type": "nominal", "legend": None,
                                     "scale": {"domain": list(HISTORY_SERIES),
                                               "range": [[1, 0], [6, 4]]}}}},
        {"transform": [{"filter": f"!({is_line})"}],
         "mark": {"type": "point", "shape": "cross", "angle": 45, "size": 60, "filled": True},
         "encoding": {"tooltip": tip}},
    ]
    return data, _spec(180, _title(f"{lane}: free total vs largest hole"), layers, enc)


def failures_legend_html() -> str:
    kinds = ("line", "dash", "cross", "cross", "cross")
    return theme.series_legend_html(list(zip((*HISTORY_SERIES, *FAILURE_SERIES),
                                             FAILURE_CHART_COLOURS, kinds)))
