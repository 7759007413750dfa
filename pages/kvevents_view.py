"""The KV events view (a tab of the Node page): a serving node's prefix cache rebuilt from its
KV-event stream (recorded by `kvviz events`, or started here), and a fleet of streams side by
side. `render()` draws the whole tab (pages/kvevents_waiting.py adds "why are requests
waiting?"; Live's compact form is pages/kvevents_live.py). Not a page of its own: app.py does
not list it."""
from __future__ import annotations

import streamlit as st

from kvviz.node.kvevents import diagnose
from kvviz.runs import directory
from kvviz.store import kv_reader
from kvviz.viz import kvevents as vk
from kvviz.viz import theme
from pages import kvevents_model, kvevents_record, recording
from pages import kvevents_waiting as kw

COLOUR_LABELS = {"evictions": "times evicted before",
                 "age_s": "age (seconds since stored)"}


GAPS_SHOWN = 1_000  # rows of the gap table listed (all are counted)


def is_live(run: str) -> bool:
    with kv_reader.connect(directory.resolve_run(directory.runs_dir(), run)) as conn:
        return kv_reader.run_state(conn).status == "running"


def panel(run: str) -> None:
    with recording.guard(f"Reading {run}"):
        path = directory.resolve_run(directory.runs_dir(), run)
        with kv_reader.connect(path) as conn:
            streams = kv_reader.streams(conn)
            counts = kv_reader.stream_counts(conn)
            gaps = kv_reader.gaps(conn, GAPS_SHOWN)
            timeline = kv_reader.timeline(conn)
            partial = kv_reader.timeline_is_partial(conn)
            model, read, total, t_last, at_least = kvevents_model.model_of(run, conn, counts)
            state = kv_reader.run_state(conn)
            end_s = kw.end_of_stream(state, timeline)
        kvevents_model.status_note(state)
        kvevents_model.cap_note(read, total, t_last, at_least)
        kvevents_model.window_note(partial, counts)
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
        # one wrapping grid: no label cut short ("re-announced (already c…") at any width
        st.html(theme.headline_html([
            ("cached blocks", f"{len(f.parent):,}", "blocks in the rebuilt prefix cache"),
            ("cached tokens", f"{f.cached_tokens:,}", "tokens those blocks hold"),
            ("stored (announced)", f"{f.stored:,}",
             "every block a BlockStored announced, re-announced ones included"),
            ("evicted", f"{f.removed:,}", "blocks a BlockRemoved took out"),
            ("re-announced (already cached)", f"{f.duplicates:,}",
             "stores of blocks the stream said were cached already"),
            ("cleared", f"{f.cleared:,}", "AllBlocksCleared events: the whole cache emptied"),
        ], min_rem=7.5))
        if f.unconfirmed:  # stored - evicted != cached: say where the difference is
            st.caption(f"{len(f.unconfirmed):,} more blocks were cached before a lost batch "
                       "and not seen since: not counted (the lost batch may have evicted "
                       "them).")
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
    kvevents_record.record_controls()
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
