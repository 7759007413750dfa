"""The Node page's real block pool: when a `kvviz attach --blocks` recording holds the vLLM
plugin's lane (docs/NODE.md, section 8), its latest map on the Live page's canvas heatmap,
its headline numbers, and "why are requests waiting?" answered from the scheduler's own
reasons. Nodes without the plugin keep the metric-based diagnosis (pages/kvevents_waiting.py).
Not a page."""
from __future__ import annotations

import json

import streamlit as st

from kvviz.runs import directory
from kvviz.store.reader import RunReader
from kvviz.viz import blockcanvas as vc
from kvviz.viz import theme
from pages import blockview, recording

EVERY_S = 1.0
WHY = {"no free blocks": "vLLM's allocate_slots found fewer free blocks than the request "
                         "needs: a true out-of-memory for it (CAPACITY)",
       "preempting": "this step preempted a running request for memory, so vLLM admitted "
                     "nobody (CAPACITY)",
       "watermark": "the blocks were free, the watermark kept them back (POLICY)",
       "max_num_seqs": "max_num_seqs requests already run (POLICY)",
       "token budget": "the step's token budget was spent (POLICY)",
       "deferred": "skipped by the scheduler: a LoRA limit or a KV transfer (POLICY)",
       "other": "memory would serve; the scheduler left it (POLICY)"}


def block_lanes(run: str) -> list[str]:
    r = RunReader(directory.resolve_run(directory.runs_dir(), run))
    try:
        return [ln for ln in r.lanes() if ln == "vllm" or ln.startswith("vllm-dp")]
    finally:
        r.close()


def panel(run: str) -> None:
    """Nothing when the recording has no plugin lane; else the live pool, refreshed."""
    with recording.guard(f"Reading {run}'s block pool"):
        lanes = block_lanes(run)
        if lanes:
            st.fragment(run_every=EVERY_S)(_pool)(run, lanes)


def _pool(run: str, lanes: list[str]) -> None:
    with recording.guard(f"Reading {run}'s block pool"):
        r = RunReader(directory.resolve_run(directory.runs_dir(), run))
        try:
            st.html(theme.legend_html())  # the colours, as on Live and Replay
            for col, lane in zip(st.columns(len(lanes)), lanes):
                with col:
                    _lane(r, lane)
        finally:
            r.close()


def _lane(r, lane: str) -> None:
    got = r.latest_blockmap(lane)
    if got is None:
        st.info(f"{lane}: no block map yet", icon=":material/hourglass_empty:")
        return
    bm, t = got
    row = r.sample_at(lane, t).iloc[-1]
    st.markdown(f"#### Block pool ({lane}), step {int(row['step']):,}")
    st.caption(f"{bm.num_blocks:,} blocks of {bm.block_size} slots, vLLM's own, at "
               f"t = {t:.1f} s (the null block 0 is not drawn: address = block id - 1)")
    blockview.blockmap_canvas(vc.canvas_data(bm, 0, bm.num_blocks, title=lane),
                              key=f"node_blocks_{lane}")
    blockview.headline_metrics(row)
    waiting(row)
    recent(r, lane)


def waiting(row) -> None:
    """Why are requests waiting? The scheduler's own answer for the head of its queue."""
    st.markdown("##### Why are requests waiting?")
    n = int(row.get("waiting") or 0)
    if not n:
        st.write(f"Nobody waits: {int(row.get('running') or 0)} running, "
                 f"{int(row['vllm_free_blocks'])} blocks free.")
        return
    reason = row.get("head_reason")
    if isinstance(reason, str):
        st.write(f"{n} waiting. The head, request {int(row['head_seq'])}: **{reason}** — "
                 f"{WHY.get(reason, reason)}. It needs {int(row['head_need_tokens']):,} "
                 f"slots; {int(row['head_free_tokens']):,} were free.")
    counts = json.loads(row.get("waiting_reasons") or "{}")
    st.caption("Waiting by reason (behind the head: `queued`, not considered in that "
               "step): " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))


def recent(r, lane: str, most: int = 5) -> None:
    ev = r.events(lane, kinds=["admit_failed", "preempted"])
    if ev.empty:
        return
    st.caption("Latest refusals and preemptions, as vLLM made them")
    for e in ev.tail(most).itertuples():
        what = (f"preempted request {int(e.seq_id)}" if e.kind == "preempted" else
                f"refused request {int(e.seq_id)} ({e.reason}): needs {int(e.need_tokens):,}"
                f" slots, {int(e.free_tokens):,} free")
        st.text(f"step {int(e.step)}: {what}")
