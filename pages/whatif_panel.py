"""The "What if?" panel: a request stream at the node's own settings and at alternatives
(kvviz.twin), its table and curves, and an alternative's block maps in Replay. Not a page:
the Node and Compare pages call `panel(source, key)`."""
from __future__ import annotations

from pathlib import Path

import streamlit as st

from kvviz.core.config import LaneSpec, model_for
from kvviz.core.errors import KvvizError
from kvviz.node.trust import plain_markdown as md
from kvviz.runs import directory
from kvviz.twin import NodeSettings, Source, plan, whatif
from kvviz.twin.configs import NAMED_SETS, alternatives
from kvviz.twin.record import record_config
from kvviz.twin.source import NO_REQUEST_LOG, from_recording, from_trace, has_request_log
from kvviz.viz.whatif import Curve, curves_figure
from pages.runpicker import RUN_KEY

FIELDS = (("block_size", "Block sizes", "16,32,64"),
          ("kv_memory", "KV memory", "0.8x,1.2x or 8GiB"),
          ("num_gpu_blocks", "Or num_gpu_blocks", "2049,4097"),
          ("max_num_seqs", "max_num_seqs", "64,128"),
          ("max_num_batched_tokens", "max_num_batched_tokens", "2048,8192"),
          ("watermark", "Watermark", "0,0.01"),
          ("prefix_caching", "Prefix caching", "on,off"))
NONE = "(lists only)"


def _form(key: str):
    """The alternatives the form asks for, or None (not submitted, or an error shown)."""
    with st.form(f"{key}:form"):
        named = st.selectbox("Named set", [NONE, *NAMED_SETS], key=f"{key}:set",
                             help="; ".join(f"{k}: " + ", ".join(f"{f} {v}" for f, v in d.items())
                                            for k, d in NAMED_SETS.items()))
        cols = st.columns(4)
        texts = {f: cols[i % 4].text_input(label, placeholder=hint, key=f"{key}:{f}")
                 for i, (f, label, hint) in enumerate(FIELDS)}
        go = st.form_submit_button("Run the alternatives")
    if not go:
        return None
    try:
        return alternatives({k: v.strip() or None for k, v in texts.items()},
                            None if named == NONE else named)
    except (KvvizError, ValueError) as exc:
        st.error(md(str(exc)))
        return None


def _table(rows: list[dict]) -> list[dict]:
    def change(r: dict, k: str) -> str:
        d = r["change"][k]
        return "" if r["baseline"] else (f"{d:+d}" if d else "=")

    return [{"configuration": r["config"], "preemptions": r["preemptions"],
             "Δ preemptions": change(r, "preemptions"), "CAPACITY": r["refusals_capacity"],
             "Δ CAPACITY": change(r, "refusals_capacity"), "POLICY": r["refusals_policy"],
             "rejected": r["rejected"], "queue steps (mean)": round(r["queue_steps_mean"], 1),
             "queue steps (p99)": r["queue_steps_p99"],
             "prefix hit rate": f"{r['prefix_hit_rate']:.1%}",
             "peak blocks": f"{r['blocks_peak']}/{r['usable_blocks']}",
             "mean blocks": round(r["blocks_mean"]), "tail waste": f"{r['tail_waste_share']:.1%}",
             "steps": r["steps"]} for r in rows]


def _replay(source: Source, res, key: str) -> None:
    labels = [r["config"] for r in res.table]
    pick = st.selectbox("Open a configuration's block maps in Replay", range(len(labels)),
                        format_func=lambda i: labels[i], key=f"{key}:pick")
    if not st.button("Record it and open Replay", key=f"{key}:replay"):
        return
    run = res.runs[pick]
    path = directory.unique_recording(directory.runs_dir(), "whatif")
    try:
        with st.spinner(f"recording {labels[pick]}"):
            record_config(source.stream, run.settings, path, source=source.name,
                          busy_steps=run.summary["steps"])
    except (KvvizError, OSError) as exc:
        st.error(md(f"could not write {path.name}: {exc}"))
        return
    st.session_state[RUN_KEY] = path.name
    st.switch_page("pages/replay.py")


def panel(source: Source, key: str) -> None:
    """Draw the panel for `source`; a result stays shown until the source changes."""
    st.subheader("What if?")
    st.caption(f"{len(source.stream.workload):,} requests; the node's own settings: "
               f"{md(source.settings.describe())}. Each alternative runs the same stream through "
               "vLLM 0.32's rule (a block size alone keeps the node's KV memory).")
    alt = _form(key)
    if alt is not None:
        try:
            plan(source, alt)
        except (KvvizError, ValueError) as exc:
            st.error(md(str(exc)))
            alt = None
    if alt is not None:
        bar = st.progress(0.0, text="starting")
        try:
            res = whatif(source, alt, progress=lambda d, n: bar.progress(
                d / n, text=f"{d}/{n} configurations"))
        except (KvvizError, ValueError, RuntimeError) as exc:  # a worker's error, named
            st.error(md(str(exc)))
            return
        finally:
            bar.empty()
        st.session_state[key] = (source.name, res)
    got = st.session_state.get(key)
    if got is None or got[0] != source.name:
        return
    res = got[1]
    check = res.self_check
    (st.success if check["equal"] else st.info if check["equal"] is None else st.warning)(
        md("Self-check: " + check["verdict"]))
    if res.note:  # fewer configurations at once than cores, for memory
        st.caption(md(res.note))
    st.dataframe(_table(res.table), hide_index=True, use_container_width=True)
    curves = [Curve(r["config"], run.curve_step, run.curve_blocks, run.curve_preempted,
                    run.settings.usable_blocks) for r, run in zip(res.table, res.runs)]
    st.plotly_chart(curves_figure(curves), use_container_width=True)
    _replay(source, res, key)


def compare_source(request, loaded) -> Source:
    """The Compare page's stream as a node: its first paged lane's block size and prefix
    caching (16, off without one), its capacity as vLLM blocks, its scheduler limits."""
    paged = [s for s in map(LaneSpec.parse, request.lanes) if s.allocator == "paged"]
    lane = paged[0] if paged else LaneSpec("paged", 16)
    lim = request.limits
    node = NodeSettings(lane.block_size, request.capacity_tokens // lane.block_size + 1,
                        lim.max_num_seqs, lim.max_num_batched_tokens,
                        lim.enable_chunked_prefill, lim.watermark, lane.prefix_caching)
    name = f"Compare: {request.workload!r}, {request.capacity_tokens} slots, {request.lanes}"
    return from_trace(loaded.workload, name, node, model_for(None, real_on_cpu=False),
                      loaded.engine.step_ms, loaded.engine.max_seq_len)


def node_panel(path, key: str) -> None:
    """The panel for an attach recording: its own stream, settings and record (read once
    per version of the file), when it has the plugin's request log; a line saying how to
    record one otherwise; st.error naming what is wrong with a log it cannot replay."""
    if not has_request_log(path):
        st.caption("What if? " + NO_REQUEST_LOG[:1].upper() + NO_REQUEST_LOG[1:] + ".")
        return
    try:
        st_ = Path(path).stat()
        version = (str(path), st_.st_mtime_ns, st_.st_size)
        got = st.session_state.get(f"{key}:source")
        if got is None or got[0] != version:
            got = (version, from_recording(path, model_for(None, real_on_cpu=False)))
            st.session_state[f"{key}:source"] = got
    except (KvvizError, OSError) as exc:
        st.subheader("What if?")
        st.error(md(str(exc)))
        return
    panel(got[1], key)
