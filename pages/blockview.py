"""Drawing a lane's block map: headline numbers, the zoom slider and its block range, and the
canvas renderer (kvviz.viz.blockcanvas). Shared by Live and Replay. Not a page."""
from __future__ import annotations

import math

import streamlit as st

from kvviz.core.config import lane_caption
from kvviz.node.trust import plain_markdown as md
from kvviz.viz import blockcanvas, theme
from kvviz.viz import timeseries as vt

# The Live page's heatmap renderer: registered once per process, as this module is imported
# once. isolate_styles=False: no shadow root, so the page's own observers and tests see the
# canvas; its CSS classes are all prefixed kvmap-.
_BLOCKMAP = st.components.v2.component("kvviz_blockmap", js=blockcanvas.JS,
                                       css=blockcanvas.CSS, isolate_styles=False)


def lane_head(lane: str) -> None:
    """A lane's name and what it is. The name comes from a recording: shown as text, never
    Markdown (links, images); a narrow column breaks it after a colon (U+200B there) and
    never after a hyphen (U+2060), so `contiguous:first-fit:pow2` wraps at its parts rather
    than inside one."""
    # md doubles every backslash of the name, so each "\:" / "\-" is an escaped : / -
    st.markdown("#### " + md(lane).replace("\\:", "\\:\u200b").replace("\\-", "\\-\u2060"))
    st.caption(md(lane_caption(lane)))


def headline_metrics(row) -> None:
    """The lane's headline numbers in two rows of four (one HTML grid: redrawn every second)."""
    st.html(theme.headline_html(vt.headline(row)))


WHOLE = (0.0, 100.0)  # the zoom slider's range that shows every block


def zoom(key: str) -> tuple[float, float]:
    """Address range to show, in % of each lane's capacity (so lanes stay aligned)."""
    return st.slider("Zoom: address range shown (% of each lane's capacity)", 0.0, 100.0,
                     WHOLE, step=0.5, key=key)


def zoom_range(start: int, stop: int, num_blocks: int) -> tuple[float, float]:
    """Blocks [start, stop) of a map as the zoom slider's (lo, hi) in % of its capacity,
    widened outward to the slider's 0.5% steps so every block asked for stays shown."""
    lo = math.floor(200 * max(0, start) / num_blocks) / 2
    hi = math.ceil(200 * min(num_blocks, stop) / num_blocks) / 2
    return lo, max(hi, lo + 0.5)


def block_range(bm, lo: float, hi: float) -> tuple[int, int]:
    """The zoom slider's (lo, hi) in % as blocks [start, stop) of a map, at least one."""
    n = bm.num_blocks
    start = min(n - 1, int(lo / 100 * n))
    return start, max(start + 1, int(hi / 100 * n))


LANE_MAX_CELLS = 4_096  # 64 x 64 cells: readable in a quarter of a 1,280 px window
PLOTLY_MAX_CELLS = 1_024  # Replay's plotly maps draw a gap around each cell: 32 x 32


def lane_max_cells(bm, lo: float, hi: float, cap: int = LANE_MAX_CELLS) -> int:
    """The cells for a lane's map at zoom (lo, hi): one per block (a slot in a contiguous
    lane) once the range holds LANE_MAX_CELLS or fewer, else LANE_MAX_CELLS. Each lane at
    its own finest unit: zooming in re-bins to finer cells down to one slot or block per
    cell (every lane shows the same % of its capacity, so the ranges stay side by side)."""
    a, b = block_range(bm, lo, hi)
    return max(1, min(cap, b - a))


def blockmap_canvas(data: dict, key: str, on_zoom=None) -> None:
    """A block map on the canvas renderer (data from blockcanvas.canvas_data). The key keeps
    the element mounted across reruns: new data repaints it in place. `on_zoom` (no
    arguments) is called when a range is dragged on it or it is double-clicked; the range is
    then `st.session_state[key].zoom` ({"start", "stop"} in blocks, or {"reset": True})."""
    _BLOCKMAP(data=data, key=key, on_zoom_change=on_zoom or (lambda: None))
