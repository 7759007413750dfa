"""One node recording's scrapes on the Node tab: the last scrape's status, the headline
numbers, per-pool rows, the gauges over time and local GPU memory. Every number drawn comes
from one read of the recording (one snapshot per redraw). Remote text goes through `md`
(escaped) or tables."""
from __future__ import annotations

import html
import math

import pandas as pd
import streamlit as st

from kvviz.node.promtext import pool_rows
from kvviz.node.servers import USAGE_DEFINITION
from kvviz.node.trust import plain_markdown as md
from kvviz.runs import directory
from kvviz.viz import gpu as vg
from kvviz.viz import node as vn
from kvviz.viz import theme
from pages import kvevents_waiting as kw
from pages import recording

LIVE_SCRAPES = 1800  # scrapes drawn while a recording grows (an hour at the default 2 s)
WAITED = "kvviz_node_waited"  # the recording this session waited for (it did not exist yet)


def metrics_rows(heads: list) -> None:
    """Headline numbers in a grid that wraps at any width: no label or value cut short."""
    st.html(theme.headline_html([(h.label, h.value, h.help) for h in heads], min_rem=7.5))


@st.fragment(run_every=2.0)
def node_panel(run: str, events=None) -> None:
    """The recording's scrapes; with `events` (node_attach.events_panel), its KV events in a
    column beside them, drawn from the same read of the latest scrapes, so that every number
    on the tab is of one instant. A recording that does not exist yet (a job just started)
    is waited for, and the page redrawn whole once it does."""
    if not (directory.runs_dir() / run).exists():  # just started: the job creates it
        st.session_state[WAITED] = run
        st.info(f"Waiting for the first scrape into {md(run)}...",
                icon=":material/hourglass_empty:")
        return
    if st.session_state.get(WAITED) == run:  # it exists now: the layout may change
        st.session_state.pop(WAITED)
        st.rerun(scope="app")
    with recording.reader(run) as r, recording.guard(f"Reading {run}"):
        if r is None:
            return
        live = r.status == "running"  # redrawn every 2 s: read a fixed window, not it all
        df = r.node_samples(last=LIVE_SCRAPES if live else None)
        if events is None:
            scrapes(r, run, df, live)
            return
        left, right = st.columns([3, 2])
        with left:
            scrapes(r, run, df, live)
        with right:
            events(run, df.tail(kw.SCRAPES_KEPT).to_dict("records"), r.meta)


def scrapes(r, run: str, df, live: bool) -> None:
    shown = (f"; the latest {len(df):,} scrapes" if live and len(df) == LIVE_SCRAPES else "")
    st.caption(f"{md(run)}: node {md(r.meta.get('url', '?'))}, recording "
               f"{md(r.status)}{shown}")
    if df.empty:
        st.info("No scrape recorded yet.", icon=":material/hourglass_empty:")
        return
    last = df.iloc[-1]
    counts = ", ".join(f"{k} {v}" for k, v in vn.status_counts(df).items())
    at = _at(last.get("t"))  # the block pool and KV events beside it name their own moments
    text = (f"Last scrape: **{md(last['status'])}** {md(last.get('message') or '')} "
            f"({md(counts)}{at})")
    (st.success if last["status"] == "ok" else st.warning)(text)
    latest = vn.latest_ok(df)
    metrics_rows(node_headlines(latest))
    st.caption(f"KV usage: {USAGE_DEFINITION} The Fleet tab uses the same definition.")
    if latest is not None and isinstance(latest.get("capacity_caveat"), str) \
            and latest["capacity_caveat"]:
        st.caption(f"KV capacity: {md(latest['capacity_caveat'])}")
    pools_table(r, latest)
    if "message" in df:  # plotly renders some HTML in hover text
        df = df.assign(message=df["message"].fillna("").astype(str).map(html.escape))
    st.plotly_chart(vn.node_figure(df), key="node_figure")
    mem = r.device_memory(last=LIVE_SCRAPES if live else None)
    reason = vg.nvml_reason(mem, r.meta)
    if reason is None:
        st.plotly_chart(vg.device_memory_figure(mem), key="node_gpu")
    else:
        st.caption(f"Local GPU memory (NVML) not recorded: {reason}")


def _at(t) -> str:
    """", at t = 3.1 s" for a finite time, else nothing."""
    try:
        t = float(t)
    except (TypeError, ValueError):
        return ""
    return f", at t = {t:.1f} s" if math.isfinite(t) else ""


def node_headlines(latest) -> list:
    """vn.headlines, with "off" as the hit rate when the node says prefix caching is off."""
    heads = vn.headlines(latest)
    off = latest is not None and latest.get("prefix_caching_off") in (1, True)
    return [h._replace(value="off", help="the node runs with prefix caching disabled")
            if off and h.label.startswith("Prefix hit rate") else h for h in heads]


def pools_table(r, latest) -> None:
    """Per-pool numbers (vLLM DP engines, SGLang attention-DP ranks) when there are several."""
    if latest is None or not (latest.get("kv_pools") or 0) > 1:
        return
    t = float(latest["t"])
    raw = r.node_samples(since_t=math.nextafter(t, -math.inf), raw=True)  # since_t is exclusive
    rows = pool_rows(raw["raw"].iloc[0]) if not raw.empty and "raw" in raw else []
    if rows:
        st.caption(f"{len(rows)} KV pools (DP engines or attention-DP ranks), summed above")
        st.dataframe(pd.DataFrame(rows), hide_index=True)


