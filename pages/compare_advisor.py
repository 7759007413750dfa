"""The Compare page's block-size advisor tab: the memory side swept on the page's workload, the
kernel side timed by `kvviz bench` (kvviz.runs.advisor). Not a page."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

import streamlit as st

from kvviz.core.errors import KvvizError
from kvviz.engine.compare import CompareRequest
from kvviz.runs import advisor, kernelbench
from kvviz.runs.status import RUNNING
from kvviz.viz import compare as vc
from pages import compare_data as data
from pages import democollector


@contextmanager
def collector_paused(coll) -> Iterator[None]:
    """The demo collector paused while the block runs (when it runs and is not paused
    already), resumed after, whatever happens."""
    pause = coll.status().state == RUNNING and not coll.control().paused
    if pause:
        coll.set_paused(True)
    try:
        yield
    finally:
        if pause:
            coll.set_paused(False)


def advisor_tab(request: CompareRequest) -> None:
    st.markdown("Sweeps paged block sizes 1 to 256 on this workload (memory side) and times "
                "decode attention through block tables on this machine (kernel side).")
    c1, c2, c3 = st.columns(3)
    tol = c1.slider("Kernel time within (% of the best)", 0, 100, 10) / 100
    limit = c2.slider("Tail waste at most (% of capacity)", 1, 30, 5) / 100
    device = c3.radio("Kernel device", ["cpu", "cuda"], horizontal=True)
    command = kernelbench.bench_command(device)
    kernel = kernelbench.load_cached(kernelbench.cache_key(command))
    label = "Measure kernel time again" if kernel else "Measure kernel time on this machine"
    coll = democollector.collector()
    if coll.status().state == RUNNING:
        st.caption("The Live demo collector is running: measuring pauses it (it would compete "
                   "for the CPU and slow every timing), and resumes it after.")
    if st.button(label):
        with st.spinner("Timing decode attention for block sizes 1..256, 3 rounds of 20 runs "
                        "each (one to a few minutes; longer on a busy machine)"), \
                collector_paused(coll):
            try:
                kernel = kernelbench.measure(command, refresh=True)
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
        st.caption(f"Kernel timings from {kernelbench.describe(command, kernel)}, measured "
                   f"{kernel.measured_at}; the bars on the curve span p10 to p90. A difference "
                   "inside that spread never decides the recommendation."
                   + (" " + advisor.CPU_TIMINGS if device == "cpu" else ""))
    prefix = False
    if data.loaded(request.workload).workload.has_chains:  # larger blocks share less
        prefix = st.checkbox("Sweep with prefix caching (the requests share prompt blocks)",
                             value=True)
    if st.button("Run block-size sweep", type="primary"):
        st.session_state.advisor_go = True
    if not st.session_state.get("advisor_go"):
        return
    sweep = data.compare(replace(request, lanes=tuple(advisor.sweep_labels(prefix=prefix))))
    sums = sweep.summaries
    memory = [advisor.memory_point(s) for s in sums]
    if prefix:
        st.caption("Prefix hit rate by block size: " + ", ".join(
            f"{m.block_size}: {m.prefix_hit_rate:.0%}" for m in memory))
    advice = advisor.recommend(memory, kernel.points if kernel else None, tol, limit,
                               source=kernelbench.describe(command, kernel) if kernel else "")
    if advice.block_size is not None:
        st.success(f"**Recommended block size: {advice.block_size}.** {advice.reason}")
    st.plotly_chart(vc.advisor_figure(memory, kernel.points if kernel else None, advice),
                    key="advisor_sweep")
