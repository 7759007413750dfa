"""The Node tab's scrape form: one scrape first (a node that does not answer is an error and
nothing starts), then the background scrape job, and its status box (shown once a scrape was
started). Remote text goes through `md` (escaped)."""
from __future__ import annotations

import streamlit as st

from kvviz.core.errors import KvvizError
from kvviz.node import scrape
from kvviz.node.promtext import NodeStatus
from kvviz.node.trust import plain_markdown as md
from kvviz.runs import directory, jobs
from pages import widgets

RUN_KEY = "kvviz_node_run"  # the Node tab's picked recording (pages/node.py)
PENDING = "kvviz_node_pending"  # a recording a start just created: the picker moves to it
PROBE_TIMEOUT_S = 3.0


@st.cache_resource(show_spinner=False)
def scraper() -> jobs.ScrapeJob:
    """The one scrape subprocess of this server, shared by every browser session."""
    return jobs.ScrapeJob(directory.runs_dir())


def scrape_controls() -> None:
    proc = scraper()
    url_col, every_col = st.columns([3, 1])
    url = url_col.text_input("Node metrics URL", key="node_url",
                             placeholder="localhost:8000 or http://gpu7:30000/metrics")
    every = every_col.number_input("Every (s)", 0.5, 600.0, 2.0, key="node_every")
    if st.button("Start scraping", key="node_start", icon=":material/play_arrow:"):
        start_scrape(proc, url, every)
    widgets.job_status("Scrape", proc, "node", hide_idle=True)


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


