"""Node: a real serving node's /metrics over time, its KV-event streams (pages/kvevents_view),
a fleet via Prometheus, and a torch CUDA memory snapshot (loaded with kvviz.torchsnap's safe
loader, never pickle.load).

Text that comes from outside (node messages, scraped bodies, Prometheus errors, URLs, file
names) is never rendered as Markdown: it goes through `md` (escaped) or st.code / tables."""
from __future__ import annotations

import html
import math

import pandas as pd
import streamlit as st

from kvviz.core.errors import KvvizError
from kvviz.node import list_nodes, scrape
from kvviz.node.promtext import NodeStatus, pool_rows
from kvviz.node.servers import USAGE_DEFINITION
from kvviz.node.trust import plain_markdown as md
from kvviz.runs import directory, jobs
from kvviz.torchsnap import loads_snapshot_sandboxed, summarize
from kvviz.torchsnap.safe_pickle import read_capped
from kvviz.viz import gpu as vg
from kvviz.viz import node as vn
from kvviz.viz import torchsnap as vs
from pages import frame, kvevents_view, node_attach, node_blocks, recording, uploads, widgets

RUN_KEY = "kvviz_node_run"
PENDING = "kvviz_node_pending"  # a recording a start just created: the picker moves to it
PROBE_TIMEOUT_S = 3.0
LIVE_SCRAPES = 1800  # scrapes drawn while a recording grows (an hour at the default 2 s)


@st.cache_resource(show_spinner=False)
def scraper() -> jobs.ScrapeJob:
    """The one scrape subprocess of this server, shared by every browser session."""
    return jobs.ScrapeJob(directory.runs_dir())


def metrics_rows(heads: list, per_row: int = 4) -> None:
    for i in range(0, len(heads), per_row):
        for cell, h in zip(st.columns(per_row), heads[i:i + per_row]):
            cell.metric(h.label, h.value, help=h.help)


def scrape_controls() -> None:
    proc = scraper()
    url_col, every_col = st.columns([3, 1])
    url = url_col.text_input("Node metrics URL", key="node_url",
                             placeholder="localhost:8000 or http://gpu7:30000/metrics")
    every = every_col.number_input("Every (s)", 0.5, 600.0, 2.0, key="node_every")
    if st.button("Start scraping", key="node_start", icon=":material/play_arrow:"):
        start_scrape(proc, url, every)
    widgets.job_status("Scrape", proc, "node")


def start_scrape(proc: jobs.ScrapeJob, url: str, every: float) -> None:
    """One scrape first: a node that does not answer is an error here, and nothing starts
    (no recording, no running job). Then the background job, and the picker moves to it."""
    try:
        with st.spinner(f"Scraping {url} once..."):
            probe = scrape.scrape_once(url, timeout_s=min(PROBE_TIMEOUT_S, every + 1.0))
        if probe.status != NodeStatus.OK:
            st.error(f"Cannot scrape {md(repr(url))}: {md(probe.status)}: "
                     f"{md(probe.message)}. Nothing was started.", icon=":material/error:")
            return
        run = proc.start(url, every).name
    except (KvvizError, ValueError, OSError) as exc:
        st.error(f"Cannot scrape {md(repr(url))}: {md(exc)}", icon=":material/error:")
        return
    st.session_state[RUN_KEY] = st.session_state[PENDING] = run


@st.fragment(run_every=2.0)
def node_panel(run: str) -> None:
    if not (directory.runs_dir() / run).exists():  # just started: the job creates it
        st.info(f"Waiting for the first scrape into {md(run)}...",
                icon=":material/hourglass_empty:")
        return
    with recording.reader(run) as r, recording.guard(f"Reading {run}"):
        if r is None:
            return
        live = r.status == "running"  # redrawn every 2 s: read a fixed window, not it all
        df = r.node_samples(last=LIVE_SCRAPES if live else None)
        shown = (f"; the latest {len(df):,} scrapes" if live and len(df) == LIVE_SCRAPES
                 else "")
        st.caption(f"{md(run)}: node {md(r.meta.get('url', '?'))}, recording "
                   f"{md(r.status)}{shown}")
        if df.empty:
            st.info("No scrape recorded yet.", icon=":material/hourglass_empty:")
            return
        last = df.iloc[-1]
        counts = ", ".join(f"{k} {v}" for k, v in vn.status_counts(df).items())
        text = (f"Last scrape: **{md(last['status'])}** {md(last.get('message') or '')} "
                f"({md(counts)})")
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


def node_tab() -> None:
    scrape_controls()
    node_attach.attach_controls()
    runs = directory.node_recordings(directory.runs_dir())
    pending = st.session_state.get(PENDING)
    if pending in runs:
        st.session_state.pop(PENDING)  # on disk now: listed like any other
    elif pending:
        runs = [pending, *runs]
    if pending:  # a start moves the picker to its own recording, not the one shown before
        st.session_state["node_pick"] = pending
    if not runs:
        st.info("No node recording yet: start scraping a node above, or record one with "
                "`kvviz scrape URL --out runs/node.db`.", icon=":material/info:")
        return
    stored = st.session_state.get(RUN_KEY)
    run = st.selectbox("Node recording", runs, key="node_pick",
                       index=runs.index(stored) if stored in runs else 0)
    st.session_state[RUN_KEY] = run
    node_blocks.panel(run)  # the vLLM plugin's real block pool, when the recording has it
    if node_attach.has_events(run):  # a kvviz attach recording: scrape and events side by side
        left, right = st.columns([3, 2])
        with left:
            node_panel(run)
        with right:
            node_attach.events_panel(run)
    else:
        node_panel(run)


def fleet_tab() -> None:
    url = st.text_input("Prometheus server", key="fleet_url",
                        placeholder="http://prometheus:9090")
    if st.button("List nodes", key="fleet_go", icon=":material/search:"):
        st.session_state["node_fleet"] = None
        try:
            st.session_state["node_fleet"] = (url, vn.fleet_table(list_nodes(url)))
        except (KvvizError, ValueError) as exc:
            st.error(f"Cannot list nodes from {md(repr(url))}: {md(exc)}",
                     icon=":material/error:")
    got = st.session_state.get("node_fleet")
    if got:
        st.caption(f"Nodes known to {md(got[0])}. KV usage: {USAGE_DEFINITION} The Node tab "
                   "uses the same definition. Where a cell says n/a, the notes below say why.")
        if got[1].empty:
            st.info("This Prometheus server scrapes no targets and has no KV series.")
        table = got[1]
        st.dataframe(table.drop(columns=["notes"]), hide_index=True, column_config={
            k: st.column_config.Column(help=vn.FLEET_HELP.get(k), width=w)
            for k, w in vn.FLEET_WIDTHS.items()})
        if not table.empty:  # remote names and notes: escaped, shown as text
            st.markdown("**Notes** (how KV usage was computed, why a cell says n/a)\n\n"
                        + "\n".join(f"- {md(r.job)} {md(r.instance)}: {md(r.notes)}"
                                     for r in table.itertuples()))


def snapshot_source() -> tuple[str, bytes] | None:
    up = st.file_uploader("torch.cuda.memory._snapshot() pickle", type=["pickle", "pkl"],
                          max_upload_size=uploads.UPLOAD_MAX_MB, key="snap_upload")
    files = directory.snapshot_files(directory.runs_dir())
    pick = st.selectbox("... or a snapshot in runs/", ["-", *files], key="snap_pick")
    if up is not None:
        if up.size > uploads.UPLOAD_MAX_MB * 2**20:
            raise KvvizError(f"{up.name}: {up.size:,} bytes is over the "
                             f"{uploads.UPLOAD_MAX_MB} MB upload limit")
        return up.name, up.getvalue()
    if pick != "-":
        return pick, read_capped(directory.resolve_snapshot(directory.runs_dir(), pick))
    return None


def snapshot_tab() -> None:
    st.caption("Read without running anything in the file: any global or class in the pickle "
               "is refused. Take one with `torch.cuda.memory._dump_snapshot('snap.pickle')`.")
    try:
        src = snapshot_source()
        if src is None:
            return
        snap = loads_snapshot_sandboxed(src[1], name=src[0])  # in a limited child process
    except (KvvizError, ValueError, OSError) as exc:
        st.error(f"Refused: {md(exc)}", icon=":material/gpp_bad:")
        return
    try:  # sizes the loader accepts (< 2**64) can still pass what int64 arithmetic holds
        summary = summarize(snap)
        figure = vs.snapshot_figure(snap)
        table = vs.segment_table(summary)
    except (OverflowError, ValueError) as exc:
        st.error(f"Refused: {md(src[0])}: sizes in this snapshot do not fit 64-bit arithmetic "
                 f"(a segment or block of 2^63 bytes or more?): {md(exc)}",
                 icon=":material/gpp_bad:")
        return
    metrics_rows(vs.headlines(summary))
    st.plotly_chart(figure, key="snap_figure")
    st.dataframe(table, hide_index=True)


frame.enter_through_app("pages/node.py")
st.title("Serving node")
st.caption("A vLLM/SGLang node through its Prometheus /metrics and its KV-event streams, a "
           "fleet through a Prometheus server, and PyTorch's caching allocator through a "
           "memory snapshot.")
node, kv, fleet, snapshot = st.tabs(["Node", "KV events", "Fleet", "PyTorch memory snapshot"])
with node:
    node_tab()
with kv:
    kvevents_view.render()
with fleet:
    fleet_tab()
with snapshot:
    snapshot_tab()
