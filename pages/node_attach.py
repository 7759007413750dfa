"""The Node tab's `kvviz attach` form and, for an attach recording, its KV events beside its
scrapes (same node, one recording). Remote text (endpoints, messages) is shown with st.text or
escaped Markdown only."""
from __future__ import annotations

import sqlite3

import streamlit as st

from kvviz.core.errors import KvvizError
from kvviz.node.kvevents import diagnose
from kvviz.node.trust import plain_markdown as md
from kvviz.runs import directory, jobs
from kvviz.store import kv_reader
from pages import kvevents_model, recording, widgets
from pages import kvevents_waiting as kw

RUN_KEY = "kvviz_node_run"  # the Node tab's picked recording (pages/node.py)
PENDING = "kvviz_node_pending"  # a recording a start just created: the picker moves to it


@st.cache_resource(show_spinner=False)
def attacher() -> jobs.AttachJob:
    """The one attach subprocess of this server, shared by every browser session."""
    return jobs.AttachJob(directory.runs_dir())


def attach_controls() -> None:
    job = attacher()
    with st.expander("Attach to a node: its /metrics and KV events in one recording",
                     expanded=False):
        url = st.text_input("Node metrics URL", key="att_url", placeholder="localhost:8000")
        c1, c2, c3, c4 = st.columns([3, 3, 2, 1])
        ev = c1.text_input("KV-events endpoint (optional)", key="att_ev",
                           placeholder="tcp://gpu7:5557 or ipc:///tmp/kv.ipc")
        rp = c2.text_input("Replay endpoint (optional)", key="att_rp",
                           placeholder="tcp://gpu7:5558")
        topic = c3.text_input("Topic", key="att_topic")
        every = c4.number_input("Every (s)", 0.5, 600.0, 2.0, key="att_every")
        if st.button("Start attach", key="att_start", icon=":material/link:"):
            try:
                run = job.start(url, ev, rp, topic, every).name
                st.session_state[RUN_KEY] = st.session_state[PENDING] = run
            except (KvvizError, ValueError, OSError) as exc:
                st.error(f"Cannot attach: {md(exc)}", icon=":material/error:")
        widgets.job_status("Attach", job, "att", hide_idle=True)


def has_events(run: str) -> bool:
    try:
        with kv_reader.connect(directory.resolve_run(directory.runs_dir(), run)) as conn:
            return kv_reader.has_kv_events(conn)
    except (OSError, KvvizError, ValueError, sqlite3.Error):  # the scrape panel says why
        return False


def node_config(meta: dict) -> int | None:
    """The node's max-num-seqs when its recording knows it (meta `node_config`, as read from
    the node), else None."""
    v = (meta.get("node_config") or {}).get("max_num_seqs") if isinstance(
        meta.get("node_config"), dict) else None
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None


def events_panel(run: str, rows: list[dict], meta: dict) -> None:
    """The recording's own KV-event stream (the same node as its scrapes), beside the scrapes
    `rows` that the scrape column drew (pages/node_panel.py: one read, one instant)."""
    with recording.guard(f"Reading {run}'s KV events"):
        st.markdown("**KV events** (this recording: the same node)")
        path = directory.resolve_run(directory.runs_dir(), run)
        with kv_reader.connect(path) as conn:
            streams = kv_reader.streams(conn)
            counts = kv_reader.stream_counts(conn)
            timeline = kv_reader.timeline(conn)
            model = kvevents_model.model_of(run, conn, counts)[0]
            end_s = kw.end_of_stream(kv_reader.run_state(conn), timeline)
        for s in streams:
            c = counts.get(s["stream_id"], {})
            st.text(f"{s['endpoint']}: {c.get('batches') or 0:,} batches "
                    f"({c.get('replayed_batches') or 0:,} from the replay buffer), "
                    f"{c.get('gaps') or 0} gaps, {c.get('lost_batches') or 0} batches lost")
        cols = st.columns(2)
        sid = [s["stream_id"] for s in streams]
        blocks = sum(model.cached_blocks(i) for i in sid)
        doubt = sum(model.unconfirmed_blocks(i) for i in sid)
        cols[0].metric("Cached blocks", f"{blocks:,}",
                       help="the prefix cache rebuilt from the events (evictable blocks "
                            "included); after a lost batch only blocks stored since, or "
                            "re-announced, count")
        cols[1].metric("Cached tokens", f"{sum(model.cached_tokens(i) for i in sid):,}")
        if doubt:
            st.caption(f"{doubt:,} more blocks were cached before a lost batch and not seen "
                       "since: not counted (the lost batch may have evicted them).")
        recent = diagnose.recent_counts(timeline, end_s, kw.WINDOW_S)
        gauges = diagnose.gauges_from_scrapes(rows, node_config(meta))
        for line in diagnose.usage_and_waiting(model, gauges, recent, kw.WINDOW_S):
            st.text(line)
