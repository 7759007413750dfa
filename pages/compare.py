"""Compare: one workload through several allocator lanes, and the block-size advisor."""
from __future__ import annotations

from dataclasses import replace

import streamlit as st

from kvviz.core.config import LENGTH_PRESETS
from kvviz.core.errors import KvvizError
from kvviz.engine.compare import (
    CompareRequest,
    SchedulerLimits,
    SyntheticWorkload,
    UploadedTrace,
    engine_for,
)
from kvviz.node.trust import plain_markdown as md
from kvviz.viz import compare as vc
from kvviz.viz import outcome as vo
from pages import compare_advisor, whatif_panel
from pages import compare_data as data
from pages.frame import enter_through_app

PAPER = ("Kwon et al., *Efficient Memory Management for Large Language Model Serving with "
         "PagedAttention*, SOSP'23, Fig. 2")


def workload_inputs() -> CompareRequest:
    """The sidebar's workload and capacity (stops the page until a chosen upload arrives)."""
    with st.sidebar:
        st.header("Workload")
        kind = st.radio("Requests from", ["Synthetic", "Trace file"], horizontal=True)
        upload = None
        if kind == "Trace file":
            f = st.file_uploader("Trace, as downloaded (up to 50 MB / 1M rows)",
                                 type=["csv", "jsonl", "json", "ndjson"],
                                 help="Azure LLM inference CSV, BurstGPT CSV, Mooncake JSONL "
                                 "(hash_ids: real prefix reuse), or kvviz CSV/JSONL "
                                 "(arrival_s, prompt_tokens, output_tokens[, prefix_group]); "
                                 "the format is detected from the first line")
            upload = (f.name, f.getvalue()) if f is not None else None
        max_len, skip = 0, False
        if upload is not None:
            max_len = st.number_input("Max sequence length (0 = the trace's longest request)",
                                      0, 10_000_000, 0, step=1024,
                                      help="longer requests are clipped, and counted")
            skip = st.checkbox("Skip unusable rows (counted)", value=False,
                               help="else the first unusable row stops with its line and column")
        preset = st.selectbox("Length preset", list(LENGTH_PRESETS), disabled=upload is not None)
        n = st.number_input("Requests", 10, 100_000, 1000, step=100, disabled=upload is not None)
        rate = st.number_input("Arrival rate (requests / simulated s, 0 = all at once)", 0.0,
                               10_000.0, 20.0, disabled=upload is not None)
        seed = st.number_input("Seed", 0, 2**31 - 1, 0, disabled=upload is not None)
        capacity = st.number_input("KV capacity (slots)", 256, 4_000_000, 16_384, step=1024)
        limits = scheduler_inputs()
    if upload is None and kind == "Trace file":
        st.info("Upload a trace in the sidebar, or switch to a synthetic workload.")
        st.stop()
    if upload is not None:
        source = UploadedTrace(upload[0], upload[1], int(max_len), bool(skip))
    else:
        source = SyntheticWorkload(preset, int(n), float(rate), int(seed))
    return CompareRequest(source, int(capacity), limits=limits)


def scheduler_inputs() -> SchedulerLimits:
    """vLLM's scheduler knobs, set to your deployment's (vLLM's defaults until changed)."""
    d = SchedulerLimits()
    with st.expander("Scheduler (vLLM's limits)"):
        seqs = st.number_input("Batch limit (max_num_seqs)", 1, 4096, d.max_num_seqs,
                               help="running requests at most; a full batch refuses with POLICY")
        budget = st.number_input("Token budget per step (max_num_batched_tokens)", 1,
                                 1_000_000, d.max_num_batched_tokens, step=1024,
                                 help="tokens computed per step: running decodes first, then "
                                      "prefill chunks")
        chunked = st.checkbox("Chunked prefill", d.enable_chunked_prefill,
                              help="off: a prompt waits for a step with budget for all of it")
        mark = st.slider("Watermark", 0.0, 0.99, d.watermark, 0.01,
                         help="share of a paged lane's blocks kept free when admitting while "
                              "others run; a request it turns away is refused with POLICY")
    return SchedulerLimits(int(seqs), int(budget), bool(chunked), float(mark))


def limits_text(lim: SchedulerLimits) -> str:
    return (f"batch limit {lim.max_num_seqs:,}, {lim.max_num_batched_tokens:,} tokens per step"
            f", chunked prefill {'on' if lim.enable_chunked_prefill else 'off'}, watermark "
            f"{lim.watermark:g}")


def show_detected(up) -> None:
    """What the upload holds, before anything runs: format, rows, lengths, reuse, skips."""
    with st.expander(f"Detected: {up.info.fmt} trace, {up.info.rows_kept} requests",
                     expanded=True):
        st.dataframe(vc.overview_frame(up), hide_index=True)
    i = up.info
    skipped = i.bad_rows + i.failed_rows + i.filtered_rows + i.outside_rows
    if up.workload.clipped or skipped:
        st.warning(f"{up.workload.clipped} requests clipped to max sequence length "
                   f"{up.max_seq_len}; {skipped} rows skipped ({i.failed_rows} failed, "
                   f"{i.bad_rows} bad, {i.filtered_rows} other models, {i.outside_rows} "
                   "outside the window).")


def allocators_tab(request: CompareRequest) -> None:
    lanes = st.multiselect("Allocator lanes", vc.lane_options(), default=list(vc.DEFAULT_LANES),
                           help="contiguous:PLACEMENT:RESERVATION or paged:BLOCK_SIZE[:prefix]")
    if st.button("Run comparison", type="primary", disabled=not lanes):
        st.session_state.compare_go = True
    if not st.session_state.get("compare_go") or not lanes:
        st.caption("Choose lanes and press **Run comparison**. Every lane sees the same "
                   "requests at the same simulated times.")
        return
    result = data.compare(replace(request, lanes=tuple(lanes)))
    df = vc.summary_frame(result.summaries, result.step_ms)
    st.plotly_chart(vc.shares_figure(df), key="compare_shares")
    st.caption("Two bars per lane: the shares averaged over all of the lane's steps, and over "
               "its memory-pressure steps, the steps where the head-of-line request was refused "
               "for memory (CAPACITY or FRAGMENTATION) or a sequence was preempted (waiting for "
               "the batch limit or the prefill token budget with memory free does not count). "
               "A lane that never was under memory pressure says so and has no second bar.")
    st.caption("Used: KV written by live requests. Reserved: held, will be written before the "
               "request ends. Internal: held, never written (over-reservation, tail of the last "
               "block). Free: in no one's hands, though a contiguous allocator may not be able "
               f"to place anything in it. The breakdown follows the memory-waste figure of "
               f"{PAPER}.")
    st.plotly_chart(vc.failures_figure(df), key="compare_failures")
    st.caption("CAPACITY: fewer free slots in total than the allocator would have to place "
               "(the reservation rounded up to whole blocks or cells; a power of two for "
               "buddy). FRAGMENTATION: enough in total, no placement (contiguous only). "
               "POLICY: a placement existed, the scheduler refused (watermark, batch limit). "
               "Counted once per blocked request and reason.")
    st.markdown("**What explains the failures.** A lane that runs more requests at once fills "
                "its memory sooner: it meets more refusals and preempts more, while it may "
                "finish the same requests sooner.")
    st.dataframe(vo.outcome_frame(df), hide_index=True, key="compare_outcome",
                 column_config={k: st.column_config.Column(help=vo.HELP.get(k), width=w)
                                for k, w in vo.WIDTHS.items()})
    st.markdown("\n".join(f"- {md(line)}" for line in vo.lane_sentences(df)))
    st.plotly_chart(vc.throughput_figure(df), key="compare_throughput")
    st.dataframe(vc.display_table(df), hide_index=True)


# The trace readers speak the command line's flags; the page names its own controls instead.
PAGE_WORDS = ((" (--skip-bad-rows skips and counts such rows)",
               ' (tick "Skip unusable rows" in the sidebar to skip and count such rows)'),
              (" (--trace-format forces one)", ""),
              ("--max-seq-len", '"Max sequence length"'),
              ("--skip-bad-rows", '"Skip unusable rows"'))


def page_words(message: str) -> str:
    """An upload error in the page's words: its controls, not `kvviz simulate`'s flags."""
    for cli, page in PAGE_WORDS:
        message = message.replace(cli, page)
    return message


enter_through_app("pages/compare.py")
st.title("Compare allocators")
request = workload_inputs()
try:
    loaded = data.loaded(request.workload)
except KvvizError as exc:
    st.error(f"Cannot use this trace: {md(page_words(str(exc)))}")
    st.stop()
workload = loaded.workload
try:
    engine_for(request, loaded)
except ValueError as exc:  # "max_batched_tokens: why": the limits cannot run together
    field, _, why = str(exc).partition(": ")
    knob = {"max_batched_tokens": "token budget per step (max_num_batched_tokens)"}
    st.error(f"Scheduler limits: {md(knob.get(field, field))}: {md(why)}")
    st.stop()
st.caption(f"{len(workload):,} requests, {workload.total_output_tokens:,} output tokens; "
           f"KV capacity {request.capacity_tokens:,} slots; step {loaded.engine.step_ms:g} ms "
           f"simulated; {limits_text(request.limits)}.")
if loaded.upload is not None:
    show_detected(loaded.upload)
tab_lanes, tab_advisor, tab_whatif = st.tabs(["Allocators", "Block-size advisor", "What if?"])
with tab_lanes:
    allocators_tab(request)
with tab_advisor:
    compare_advisor.advisor_tab(request)
with tab_whatif:
    whatif_panel.panel(whatif_panel.compare_source(request, loaded), "compare:whatif")
