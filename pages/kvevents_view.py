"""The KV events view (a tab of the Node page): a serving node's prefix cache rebuilt from its
KV-event stream (recorded by `kvviz events`, or started here), and a fleet of streams side by
side. `render()` draws the whole tab (pages/kvevents_waiting.py adds "why are requests
waiting?"; Live's compact form is pages/kvevents_live.py). Not a page of its own: app.py does
not list it."""
from __future__ import annotations

import streamlit as st

from kvviz.core.errors import KvvizError
from kvviz.node.kvevents import diagnose, rebuild
from kvviz.node.trust import plain_markdown as md
from kvviz.runs import directory, jobs
from kvviz.store import kv_reader, liveness
from kvviz.viz import kvevents as vk
from pages import kvevents_waiting as kw
from pages import recording, widgets

COLOUR_LABELS = {"evictions": "times evicted before",
                 "age_s": "age (seconds since stored)"}
STATE = "kvviz_kvevents_model"  # (recording, last batch id, CacheModel) of this session


@st.cache_resource(show_spinner=False)
def recorder() -> jobs.EventsJob:
    """The one KV-event recording job of this server, shared by every browser session."""
    return jobs.EventsJob(directory.runs_dir())


def record_controls() -> None:
    rec = recorder()
    with st.expander("Record a node's KV-event stream", expanded=False):
        eps = st.text_input("Endpoints (space-separated)", key="kve_eps",
                            placeholder="tcp://10.0.0.7:5557 tcp://10.0.0.8:5557")
        c1, c2, c3 = st.columns(3)
        ranks = c1.number_input("DP ranks per endpoint", 1, 64, 1, key="kve_ranks")
        replay = c2.text_input("Replay endpoints (optional)", key="kve_replay")
        topic = c3.text_input("Topic", key="kve_topic")
        if st.button("Start recording", key="kve_start", icon=":material/play_arrow:"):
            try:
                st.session_state["kve_run"] = rec.start(eps.split(), int(ranks),
                                                         replay.split() or None, topic).name
            except (KvvizError, ValueError, OSError) as exc:
                st.error(f"Cannot record: {md(exc)}", icon=":material/error:")
        widgets.job_status("KV-event recording", rec, "kve")


EVENT_CAP = 1_000_000  # block stores + removals one session rebuilds the cache from
STEP = 500  # batches decoded between checks of the cap
GAPS_SHOWN = 1_000  # rows of the gap table listed (all are counted)


def is_live(run: str) -> bool:
    with kv_reader.connect(directory.resolve_run(directory.runs_dir(), run)) as conn:
        return kv_reader.run_state(conn).status == "running"


def status_note(state: kv_reader.RunState) -> None:
    """Say how the recording ended when that was not by itself: killed, or an error."""
    if state.status == liveness.STOPPED_UNEXPECTEDLY:
        st.warning("This recording stopped unexpectedly: it still says running, but its "
                   "writer stopped committing long ago (it was killed: by its memory guard's "
                   "last resort, the OOM killer, SIGKILL). What it committed is intact and "
                   "shown below.", icon=":material/warning:")
    elif state.status == "error":
        st.error(f"This recording ended with an error: {md(state.message or 'no message')}",
                 icon=":material/error:")


def model_of(run: str, conn, counts: dict | None = None):
    """The cache rebuilt from the recording's first EVENT_CAP block stores and removals (what
    this session read so far is kept, so a live recording is read on from its last batch):
    (model, stores and removals read, those the recording holds, the t of the last batch
    read, whether those it holds are a lower bound). `counts`: kv_reader.stream_counts's, if
    read already."""
    held = st.session_state.get(STATE)
    if held is None or held[0] != run:
        held = (run, 0, None, 0)
    _, last, model, read = held
    while read < EVENT_CAP:
        model, nxt = rebuild.load_model(conn, last, model, limit=STEP)
        if nxt == last:
            break
        read, last = read + kv_reader.work_between(conn, last, nxt), nxt
    st.session_state[STATE] = (run, last, model, read)
    total, at_least = (read, False) if read < EVENT_CAP else kv_reader.work_total(
        kv_reader.stream_counts(conn) if counts is None else counts)
    if at_least:  # the counts cover a window: more is left when batches are
        at_least = kv_reader.batches_after(conn, last) > 0
    return model, read, total, kv_reader.batch_t(conn, last), at_least


def cap_note(read: int, total: int, t_last, at_least: bool = False) -> None:
    """Say that the view stops at the cap, and where."""
    if total > read or at_least:
        at = f" (up to t = {t_last:.1f} s)" if isinstance(t_last, (int, float)) else ""
        holds = (f"{total:,}" if not at_least else f"at least {total:,}" if total > read
                 else f"more than {read:,}")
        st.warning(f"This recording holds {holds} block stores and removals; the cache "
                   f"below is rebuilt from the first {read:,}{at}: this page stops reading "
                   f"once it has {EVENT_CAP:,}, to stay quick and bounded in memory. `kvviz "
                   "export` and the recording itself hold all of it.",
                   icon=":material/content_cut:")


def window_note(partial: bool, counts: dict) -> None:
    """Say which figures cover only the newest kv_reader.WINDOW batches."""
    what = ["the timeline"] if partial else []
    if any(c.get("partial") for c in counts.values()):
        what.append("the counts of streams without a final summary")
    if what:
        st.caption(f"{' and '.join(what).capitalize()}: the newest {kv_reader.WINDOW:,} "
                   "batches only (this page reads a bounded slice of a long recording).")


def panel(run: str) -> None:
    with recording.guard(f"Reading {run}"):
        path = directory.resolve_run(directory.runs_dir(), run)
        with kv_reader.connect(path) as conn:
            streams = kv_reader.streams(conn)
            counts = kv_reader.stream_counts(conn)
            gaps = kv_reader.gaps(conn, GAPS_SHOWN)
            timeline = kv_reader.timeline(conn)
            partial = kv_reader.timeline_is_partial(conn)
            model, read, total, t_last, at_least = model_of(run, conn, counts)
            state = kv_reader.run_state(conn)
            end_s = kw.end_of_stream(state, timeline)
        status_note(state)
        cap_note(read, total, t_last, at_least)
        window_note(partial, counts)
        names = {s["stream_id"]: f"{s['endpoint']} (rank {s['dp_rank']})" for s in streams}
        summaries = [{**s, **counts.get(s["stream_id"], {}),
                      "cached_blocks": model.cached_blocks(s["stream_id"]),
                      "cached_tokens": model.cached_tokens(s["stream_id"])} for s in streams]
        one, fleet = st.tabs(["One cache", "Streams side by side"])
        with one:
            node_view(model, streams, names, summaries, gaps, timeline)
            kw.waiting_section(model, timeline, end_s, kw.scraped_gauges(run))
        with fleet:
            st.dataframe(vk.stream_table(summaries), hide_index=True)
            ids = [s["stream_id"] for s in streams]
            if len(ids) >= 2:
                st.plotly_chart(vk.overlap_figure([names[i] for i in ids],
                                                  diagnose.overlap(model, ids)), key="kve_ov")
            else:
                st.info("One stream: record several endpoints to compare pods.")


def node_view(model, streams, names, summaries, gaps, timeline) -> None:
    keys = sorted(model.forests)
    if not keys:
        st.info("No KV events recorded yet.", icon=":material/hourglass_empty:")
    else:
        label = {k: f"{names.get(k.stream, k.stream)} / {k.medium} / group {k.group}"
                 for k in keys}
        key = st.selectbox("Cache", keys, format_func=label.get, key="kve_forest")
        f = model.forests[key]
        cols = st.columns(6)
        for c, (t, v) in zip(cols, [("cached blocks", len(f.parent)),
                                    ("cached tokens", f.cached_tokens),
                                    ("stored (announced)", f.stored), ("evicted", f.removed),
                                    ("re-announced (already cached)", f.duplicates),
                                    ("cleared", f.cleared)]):
            c.metric(t, f"{v:,}")
        life, div = f.median_lifetime(), sorted(f.divergence_depths())
        st.text(f"Median block lifetime (store to eviction): "
                f"{'none evicted yet' if life is None else f'{life:.1f} s'}; prompts diverge "
                f"at block {div[len(div) // 2] if div else '-'} (median of {len(div)} branch "
                f"points); {f.unknown_removals} removals of blocks never seen stored.")
        colour = st.radio("Colour", ["evictions", "age_s"], horizontal=True, key="kve_colour",
                          format_func=COLOUR_LABELS.get)
        table = vk.forest_table(f, now=max(f.stored_t.values(), default=0.0))
        st.plotly_chart(vk.forest_figure(table, colour), key="kve_forest_fig")
        top, churn = st.columns(2)
        top.caption("Top prefixes by the cached content that depends on them")
        top.dataframe(vk.top_prefixes(table), hide_index=True)
        churn.caption("Prefixes evicted and then stored again (recomputed), most often first")
        churn.dataframe(vk.churned_prefixes(f), hide_index=True)
    st.plotly_chart(vk.timeline_figure(timeline, names), key="kve_timeline")
    gap_counts = {s["stream_id"]: (s.get("gaps") or 0, s.get("lost_batches") or 0)
                  for s in summaries}
    restarts = {s["stream_id"]: s.get("restarts") or 0 for s in summaries}
    st.subheader("Diagnoses")
    found = diagnose.diagnoses(model, names, gap_counts, restarts)
    for line in found or ["Nothing unusual found in the recorded stream."]:
        st.text(line)  # plain text: endpoints and streams are remote data, never Markdown
    if gaps:
        many = sum(n for n, _ in gap_counts.values()) + sum(restarts.values())
        st.caption("Sequence gaps and publisher restarts" + (
            f" (the first {len(gaps):,} of {many:,})" if many > len(gaps) else ""))
        st.dataframe(gaps, hide_index=True)


def render() -> None:
    """The whole KV events tab: record controls, a recording picker, its view."""
    st.caption("The prefix cache of vLLM / SGLang / TensorRT-LLM nodes, rebuilt from the "
               "KV-event streams they publish over ZeroMQ (see docs/NODE.md to enable them).")
    record_controls()
    runs = directory.kv_event_recordings(directory.runs_dir())
    if not runs:
        st.info("No KV-event recording yet: start one above, or run `kvviz events "
                "tcp://HOST:5557 --out runs/events.db`.", icon=":material/info:")
        return
    pick = st.selectbox("KV-event recording", runs, key="kve_pick")
    with recording.guard(f"Reading {pick}"):
        if is_live(pick):  # still being written: follow it
            st.fragment(run_every=2.0)(panel)(pick)
        else:
            panel(pick)
