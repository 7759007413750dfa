"""Reading what AppTest rendered: plotly specs, decoded heatmap arrays."""
from __future__ import annotations

import base64
import json
import re
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
from streamlit.testing.v1 import AppTest

from tests.pages.apptest_fixtures import framed

TIMEOUT = 60
ROOT = Path(__file__).resolve().parents[2]


def figures(at: AppTest) -> list[dict]:
    """Every plotly chart on the page as its figure JSON (UnknownElement.proto.spec)."""
    return [json.loads(el.proto.spec) for el in at.get("plotly_chart")]


def vega_charts(at: AppTest) -> list[tuple[dict, pd.DataFrame]]:
    """Every Vega-Lite chart on the page: its spec and its data (Arrow IPC in the proto)."""
    out = []
    for el in at.get("vega_lite_chart"):
        data = pa.ipc.open_stream(el.proto.data.data).read_all().to_pandas()
        out.append((json.loads(el.proto.spec), data))
    return out


ARROW_REF = "__streamlit_arrow_ref__"  # how Streamlit points from the JSON into an Arrow blob


def canvases(at: AppTest) -> list[tuple[dict, pd.DataFrame]]:
    """Every canvas heatmap (kvviz.viz.blockcanvas via pages/blockview.blockmap_canvas) on the
    page: the meta it was sent and its cells, decoded from the component's Arrow blob."""
    out = []
    for el in at.get("bidi_component"):
        if el.proto.component_name != "kvviz_blockmap":
            continue
        payload = json.loads(el.proto.mixed.json)
        blob = el.proto.mixed.arrow_blobs[payload["cells"][ARROW_REF]].data
        out.append((payload["meta"], pa.ipc.open_stream(blob).read_all().to_pandas()))
    return out


def heatmaps(at: AppTest) -> list[dict]:
    return [f for f in figures(at) if f["data"] and f["data"][0].get("type") == "heatmap"]


def decode(arr: dict | list) -> np.ndarray:
    """Plotly's typed array ({'dtype', 'bdata', 'shape'}) back to numpy."""
    if isinstance(arr, list):
        raise AssertionError("the figure carries a Python list, not a typed numpy array")
    out = np.frombuffer(base64.b64decode(arr["bdata"]), dtype=np.dtype(arr["dtype"]))
    if "shape" in arr:
        out = out.reshape([int(x) for x in str(arr["shape"]).split(",")])
    return out


def page(path: str, run: str | None = None) -> AppTest:
    at = AppTest.from_file(str(ROOT / path), default_timeout=TIMEOUT)
    if path != "app.py":
        framed(at)
    if run is not None:
        at.session_state["kvviz_run"] = run
    return at.run()


def no_exception(at: AppTest) -> None:
    assert not at.exception, [e.message for e in at.exception]


def rerun_until(at: AppTest, cond, timeout_s: float = 40.0) -> AppTest:
    end = time.monotonic() + timeout_s
    while True:
        at.run()
        no_exception(at)
        if cond(at):
            return at
        if time.monotonic() > end:
            raise AssertionError("condition not met in time")
        time.sleep(0.5)


def shown(el) -> str:
    """An st.error / st.warning body as the reader sees it: remote and recording text is
    escaped for Markdown (kvviz.node.trust.plain_markdown), so drop the backslashes."""
    return re.sub(r"\\(.)", r"\1", el.value)


def tiles(at: AppTest) -> dict[str, str]:
    """label -> value of every headline tile drawn (kvviz.viz.theme.headline_html), and of every
    st.metric, so a test reads a number whichever way the page draws it."""
    import html as _html
    out = {m.label: m.value for m in at.get("metric")}
    for h in at.get("html"):
        for label in re.findall(r'aria-label="([^"]*)"', str(h.proto.body)):
            name, _, value = _html.unescape(label).partition(": ")
            out[name] = value
    return out


def tile_grids(at: AppTest, has: str = "Largest hole") -> list[dict[str, str]]:
    """Each headline grid drawn that has a tile `has` (one per lane, in lane order): label ->
    value."""
    import html as _html
    out = []
    for h in at.get("html"):
        labels = re.findall(r'aria-label="([^"]*)"', str(h.proto.body))
        row = dict(_html.unescape(x).partition(": ")[::2] for x in labels)
        if has in row:
            out.append(row)
    return out

