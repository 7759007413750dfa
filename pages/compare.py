"""Compare: one workload through several allocator lanes, and the block-size advisor."""
from __future__ import annotations

import contextvars
import math
from dataclasses import replace

import streamlit as st

from kvviz import advisor
from kvviz.config import LENGTH_PRESETS, CacheConfig, EngineConfig, LaneSpec, WorkloadConfig
from kvviz.engine import Simulation
from kvviz.errors import KvvizError
from kvviz.node.trust import plain_markdown as md
from kvviz.viz import compare as vc
from kvviz.viz import outcome as vo
from kvviz.workload import Workload, generate
from pages import common

ENGINE = EngineConfig()
PAPER = ("Kwon et al., *Efficient Memory Management for Large Language Model Serving with "
         "PagedAttention*, SOSP'23, Fig. 2")


@st.cache_resource(max_entries=4, show_spinner=False)
def load_upload(name: str, data: bytes, max_seq_len: int, skip: bool = False) -> vc.Upload:
    return vc.read_upload_info(name, data, max_seq_len=max_seq_len or None, skip_bad_rows=skip)


def upload_of(source: tuple) -> vc.Upload:
    return load_upload(source[4] or "trace", source[5], source[6], source[7])


def load_workload(preset: str, n: int, rate: float, seed: int, name: str | None,
                  data: bytes | None, max_seq_len: int = 0, skip: bool = False) -> Workload:
    if data is not None:
        return load_upload(name or "trace", data, max_seq_len, skip).workload
    return synthetic(preset, n, rate, seed)


@st.cache_resource(max_entries=4, show_spinner=False)
def synthetic(preset: str, n: int, rate: float, seed: int) -> Workload:
    return generate(WorkloadConfig(preset, num_requests=n, rate=rate or math.inf, seed=seed,
                                   max_seq_len=ENGINE.max_seq_len))


def engine_for(source: tuple) -> EngineConfig:
    """A trace's lanes reserve up to its own max_seq_len (contiguous max reservation)."""
    if source[5] is None:
        return ENGINE
    return replace(ENGINE, max_seq_len=upload_of(source).max_seq_len)


@st.cache_data(max_entries=128, show_spinner=False)
def run_lane(source: tuple, lane: str, capacity: int, _progress=None) -> dict:
    sim = Simulation(load_workload(*source), [LaneSpec.parse(lane)],
                     CacheConfig(capacity_tokens=capacity), engine_for(source))
    return sim.run(progress=_progress)[0]


def run_lanes(source: tuple, lanes: list[str], capacity: int) -> list[dict]:
    """One lane at a time, so the bar can say which lane runs and how far it got."""
    bar = st.progress(0.0, text="starting")
    # Streamlit records st calls made inside a cached function (context variables) to replay
    # them on a hit; the bar lives outside run_lane, so update it in the caller's context.
    outside = contextvars.copy_context()
    out = []
    for i, lane in enumerate(lanes):
        def tick(done: int, total: int, i: int = i, lane: str = lane) -> None:
            outside.run(bar.progress, min(1.0, (i + done / max(total, 1)) / len(lanes)),
                        text=f"lane {i + 1}/{len(lanes)} {lane}: {done}/{total} requests done")
        tick(0, 1)
        out.append(run_lane(source, lane, capacity, _progress=tick))
    bar.empty()
    return out


def workload_inputs() -> tuple:
    with st.sidebar:
        st.header("Workload")
        kind = st.radio("Requests from", ["Synthetic", "Trace file"], horizontal=True)
        upload = st.session_state.get("compare_test_upload")  # test hook: (name, bytes)
        if kind == "Trace file" and upload is None:
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
    if upload is None and kind == "Trace file":
        st.info("Upload a trace in the sidebar, or switch to a synthetic workload.")
        st.stop()
    if upload is not None:
        return ("", 0, 0.0, 0, upload[0], upload[1], int(max_len), bool(skip)), int(capacity)
    return (preset, int(n), float(rate), int(seed), None, None, 0, False), int(capacity)


def show_detected(source: tuple) -> None:
    """What the upload holds, before anything runs: format, rows, lengths, reuse, skips."""
    up = upload_of(source)
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


def allocators_tab(source: tuple, capacity: int) -> None:
    lanes = st.multiselect("Allocator lanes", vc.lane_options(), default=list(vc.DEFAULT_LANES),
                           help="contiguous:PLACEMENT:RESERVATION or paged:BLOCK_SIZE[:prefix]")
    if st.button("Run comparison", type="primary", disabled=not lanes):
        st.session_state.compare_go = True
    if not st.session_state.get("compare_go") or not lanes:
        st.caption("Choose lanes and press **Run comparison**. Every lane sees the same "
                   "requests at the same simulated times.")
        return
    df = vc.summary_frame(run_lanes(source, lanes, capacity), ENGINE.step_ms)
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


def advisor_tab(source: tuple, capacity: int) -> None:
    st.markdown("Sweeps paged block sizes 1 to 256 on this workload (memory side) and times "
                "decode attention through block tables on this machine (kernel side).")
    c1, c2, c3 = st.columns(3)
    tol = c1.slider("Kernel time within (% of the best)", 0, 100, 10) / 100
    limit = c2.slider("Tail waste at most (% of capacity)", 1, 30, 5) / 100
    device = c3.radio("Kernel device", ["cpu", "cuda"], horizontal=True)
    command = st.session_state.get("advisor_test_command") or advisor.bench_command(device)
    kernel = advisor.load_cached(advisor.cache_key(command))
    label = "Measure kernel time again" if kernel else "Measure kernel time on this machine"
    if st.button(label):
        with st.spinner("Timing decode attention for block sizes 1..256, 3 rounds of 20 runs "
                        "each (one to a few minutes; longer on a busy machine)"):
            try:
                kernel = advisor.measure(command, refresh=True)
                st.session_state.pop("advisor_bench_error", None)
            except KvvizError as exc:
                st.session_state.advisor_bench_error = str(exc)
    if kernel is None:
        err = st.session_state.get("advisor_bench_error")
        if err:
            st.warning(f"No kernel timings: {err}. The memory side is shown alone.")
        else:
            st.info("No kernel timings for this machine yet; the memory side is shown alone.")
    else:
        st.caption(f"Kernel timings from {advisor.describe(command, kernel)}, measured "
                   f"{kernel.measured_at}; the bars on the curve span p10 to p90. A difference "
                   "inside that spread never decides the recommendation.")
    prefix = False
    if load_workload(*source).has_chains:  # shared prompts: larger blocks share less
        prefix = st.checkbox("Sweep with prefix caching (the requests share prompt blocks)",
                             value=True)
    if st.button("Run block-size sweep", type="primary"):
        st.session_state.advisor_go = True
    if not st.session_state.get("advisor_go"):
        return
    sums = run_lanes(source, advisor.sweep_labels(prefix=prefix), capacity)
    memory = [advisor.memory_point(s) for s in sums]
    if prefix:
        st.caption("Prefix hit rate by block size: " + ", ".join(
            f"{m.block_size}: {m.prefix_hit_rate:.0%}" for m in memory))
    advice = advisor.recommend(memory, kernel.points if kernel else None, tol, limit,
                               source=advisor.describe(command, kernel) if kernel else "")
    if advice.block_size is not None:
        st.success(f"**Recommended block size: {advice.block_size}.** {advice.reason}")
    st.plotly_chart(vc.advisor_figure(memory, kernel.points if kernel else None, advice),
                    key="advisor_sweep")


common.enter_through_app("pages/compare.py")
st.title("Compare allocators")
source, capacity = workload_inputs()
try:
    workload = load_workload(*source)
except KvvizError as exc:
    st.error(f"Cannot use this trace: {md(exc)}")
    st.stop()
st.caption(f"{len(workload)} requests, {workload.total_output_tokens} output tokens; "
           f"KV capacity {capacity} slots; step {ENGINE.step_ms:g} ms simulated.")
if source[5] is not None:
    show_detected(source)
tab_lanes, tab_advisor = st.tabs(["Allocators", "Block-size advisor"])
with tab_lanes:
    allocators_tab(source, capacity)
with tab_advisor:
    advisor_tab(source, capacity)
