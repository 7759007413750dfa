"""The Live page's collector controls (not a page): the status box with Pause / Step, who
started the running collector and when, and the settings form, filled with what runs.

The demo collector is one per server (pages/democollector.collector): a Start here changes what
every open tab shows, and the form says so.
"""
from __future__ import annotations

import time

import streamlit as st

from kvviz.core.config import LENGTH_PRESETS, PLACEMENTS, RESERVE_POLICIES
from kvviz.core.errors import KvvizError
from kvviz.node.trust import plain_markdown as md
from kvviz.runs import directory, jobs
from kvviz.runs.status import RUNNING
from kvviz.settings.collector import CollectorConfig, parse_lanes
from pages import democollector, widgets

STATUS_EVERY_S = 1.0
BLOCK_SIZES = [1, 2, 4, 8, 16, 32, 64, 128, 256]
LANE_CHOICES = ([f"contiguous:{p}:{r}" for p in PLACEMENTS for r in RESERVE_POLICIES]
                + [f"paged:{b}" for b in BLOCK_SIZES] + [f"paged:{b}:prefix" for b in BLOCK_SIZES])
MAX_LANES = 4
PREFIX_DEFAULT = 0.5  # prefix sharing used when a prefix lane is asked for with none
FORM_FOR = "live_form_for"  # the recording the settings form was filled from


def running_config(coll: jobs.Collector) -> CollectorConfig:
    return coll.config or jobs.DEMO


def origin_text(origin: jobs.Origin | None, session: str | None) -> str:
    """"Started 10:12:03 from another tab (Start)": who changed the shared collector."""
    if origin is None:
        return "Not started from this dashboard yet."
    at = time.strftime("%H:%M:%S", time.localtime(origin.at))
    if origin.how == "opened the page":
        return f"Started {at} with the default demo, when the Live page was first opened."
    if origin.how == "a viewer came back":
        return f"Started {at} again with the same settings, when a viewer came back."
    who = "from this tab" if origin.session == session else "from another tab"
    return f"Started {at} {who} ({origin.how})."


def config_text(c: CollectorConfig, running: bool = True) -> str:
    """The collector's settings in one line (the form below shows the same values): "Running:"
    while it runs, "Last run:" once it stopped."""
    src = f"trace {c.trace}" if c.trace else f"workload {c.workload}"
    share = f", prefix sharing {c.prefix_sharing:g}" if c.prefix_sharing else ""
    mark = f", watermark {c.watermark:g}" if c.watermark else ""
    head = "Running" if running else "Last run"
    return (f"{head}: {src}{share}, {c.rate:g} arrivals/s, batch limit {c.max_num_seqs}"
            f"{mark}, {c.capacity_tokens:,} slots per lane, mode {c.mode}; lanes "
            + ", ".join(s.label for s in c.lanes))


def show() -> None:
    """The status box, then the settings form, both for the run that is current now."""
    st.session_state[FORM_FOR] = democollector.collector().status().recording
    status_panel()
    settings_form()


@st.fragment(run_every=STATUS_EVERY_S)
def status_panel() -> None:
    """Every second: the collector's status, pause/step, who started it. A run started from
    another tab reruns this page so the form shows the new settings."""
    coll = democollector.collector()
    session = democollector.session_id()
    s = widgets.job_status_box("Collector", coll, "collector",
                               restart=lambda: coll.restart(session=session))
    ctl = coll.control()
    running = s.state == RUNNING
    st.caption(md(origin_text(coll.origin, session)) + " " + md(config_text(
        running_config(coll), running)))
    c1, c2, c3 = st.columns([1, 1, 6])
    if ctl.paused:
        if c1.button("Resume", key="collector_resume", icon=":material/play_arrow:",
                     disabled=not running):
            coll.set_paused(False)
            st.rerun()
    elif c1.button("Pause", key="collector_pause", icon=":material/pause:",
                   disabled=not running, help="Stop the engine clock: no arrivals, no steps "
                   "(every open tab sees the pause)"):
        coll.set_paused(True)
        st.rerun()
    if c2.button("Step", key="collector_step", icon=":material/skip_next:",
                 disabled=not running, help="Pause, then run one engine step and show it"):
        coll.step()
        st.rerun()
    if ctl.paused and running:
        c3.info(f"Paused: the engine clock stands still (steps taken while paused: "
                f"{ctl.steps}).", icon=":material/pause_circle:")
    shown = st.session_state.get(FORM_FOR)
    if shown is not None and s.recording is not None and shown != s.recording:
        st.rerun()  # another tab started a new run: show its settings in the form


def settings_form() -> None:
    """The settings, filled with the running configuration (re-filled for each new run)."""
    coll = democollector.collector()
    cfg = running_config(coll)
    k = f"_{st.session_state.get(FORM_FOR)}"  # new widgets, with its values, for each new run
    with st.expander("Collector settings: workload, lanes, prefix sharing, rate, limits"):
        st.caption("One collector serves every open tab: **Start changes what every viewer "
                   "sees**, and their settings forms then show the new values.")
        with st.form(f"collector_form{k}", border=False):
            c1, c2, c3 = st.columns(3)
            presets = list(LENGTH_PRESETS)
            workload = c1.selectbox("Workload", presets, index=presets.index(cfg.workload),
                                    key=f"live_workload{k}")
            mode = c1.radio("Mode", ["real", "sim"], index=["real", "sim"].index(cfg.mode),
                            horizontal=True, key=f"live_mode{k}",
                            help="real: torch KV pools and attention; sim: allocator only")
            labels = [s.label for s in cfg.lanes]
            choices = LANE_CHOICES + [x for x in labels if x not in LANE_CHOICES]
            lanes = c2.multiselect(
                "Lanes", choices, default=labels, max_selections=MAX_LANES,
                key=f"live_lanes{k}", help="Allocators fed the same request stream, side by "
                "side. contiguous:PLACEMENT:RESERVATION (max = max_seq_len up front, pow2 = "
                "next power of two, exact = the final length); paged:BLOCK[:prefix]")
            share = c2.slider(
                "Prefix sharing", 0.0, 1.0, float(cfg.prefix_sharing), 0.05,
                key=f"live_share{k}", help="Share of requests that begin with one of 4 "
                "shared 256-token system prompts: what a paged:N:prefix lane can reuse")
            rate = c3.number_input("Arrivals per second", 0.01, 1e4, float(min(cfg.rate, 1e4)),
                                   key=f"live_rate{k}")
            seqs = c3.number_input("Batch limit (running sequences)", 1, 4096,
                                   int(cfg.max_num_seqs), key=f"live_seqs{k}",
                                   help="max_num_seqs: a full batch refuses with POLICY")
            mark = c2.slider("Watermark (paged lanes)", 0.0, 0.99, float(cfg.watermark), 0.01,
                             key=f"live_mark{k}", help="vLLM's watermark: the share of a "
                             "paged lane's blocks kept free when admitting while others run; "
                             "a request it turns away is refused with POLICY")
            traces = ["(synthetic workload)"] + [t.name for t in
                                                 directory.list_traces(directory.runs_dir())]
            now = next((t for t in traces if cfg.trace and cfg.trace.endswith("/" + t)),
                       traces[0])
            trace = c3.selectbox("Trace from the runs directory", traces,
                                 index=traces.index(now), key=f"live_trace{k}",
                                 help="Azure, BurstGPT, Mooncake or kvviz CSV/JSONL placed in "
                                      "the runs directory; replayed instead of the workload")
            start = st.form_submit_button("Start / restart with these settings (every tab)",
                                          type="primary")
    if start:
        submit(coll, workload, mode, lanes, share, rate, int(seqs), float(mark),
               None if trace == traces[0] else trace)


def submit(coll: jobs.Collector, workload: str, mode: str, lanes: list[str], share: float,
           rate: float, seqs: int, mark: float, trace: str | None) -> None:
    if not lanes:
        st.error("Settings: pick at least one lane.")
        return
    if share == 0 and any(x.endswith(":prefix") for x in lanes):
        share = PREFIX_DEFAULT  # caching needs prompts that share something
        st.toast(f"Prefix sharing set to {PREFIX_DEFAULT:g}: with none, a prefix lane has "
                 "nothing to reuse.")
    try:
        path = None if trace is None else directory.resolve_trace(directory.runs_dir(), trace)
        config = jobs.demo_config(mode=mode, workload=workload, lanes=parse_lanes(lanes),
                                  prefix_sharing=share, rate=rate, max_num_seqs=seqs,
                                  watermark=mark, trace=path and str(path))
    except (ValueError, KvvizError) as exc:
        st.error(f"Settings: {md(exc)}")
        return
    coll.start(config, session=democollector.session_id(), how="Start")
    st.rerun()
