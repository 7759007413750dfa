"""The Node page's PyTorch memory snapshot tab: a torch.cuda.memory._snapshot() pickle, read
with kvviz.torchsnap's safe loader in a limited child process (never pickle.load)."""
from __future__ import annotations

import streamlit as st

from kvviz.core.errors import KvvizError
from kvviz.node.trust import plain_markdown as md
from kvviz.runs import directory
from kvviz.torchsnap import loads_snapshot_sandboxed, summarize
from kvviz.torchsnap.safe_pickle import read_capped
from kvviz.viz import torchsnap as vs
from pages import node_panel, uploads


def snapshot_source() -> tuple[str, bytes] | None:
    up = st.file_uploader("torch.cuda.memory._snapshot() pickle", type=["pickle", "pkl"],
                          max_upload_size=uploads.UPLOAD_MAX_MB, key="snap_upload")
    files = directory.snapshot_files(directory.runs_dir())
    pick = st.selectbox("... or a snapshot in runs/", ["-", *files], key="snap_pick")
    if up is not None:
        if up.size > uploads.UPLOAD_MAX_MB * 2**20:
            raise KvvizError(f"{up.name}: {up.size:,} bytes is over the "
                             f"{uploads.UPLOAD_MAX_MB} MB upload limit")
        return up.name, up.getvalue()
    if pick != "-":
        return pick, read_capped(directory.resolve_snapshot(directory.runs_dir(), pick))
    return None


def snapshot_tab() -> None:
    st.caption("Read without running anything in the file: any global or class in the pickle "
               "is refused. Take one with `torch.cuda.memory._dump_snapshot('snap.pickle')`.")
    try:
        src = snapshot_source()
        if src is None:
            return
        snap = loads_snapshot_sandboxed(src[1], name=src[0])  # in a limited child process
    except (KvvizError, ValueError, OSError) as exc:
        st.error(f"Refused: {md(exc)}", icon=":material/gpp_bad:")
        return
    try:  # sizes the loader accepts (< 2**64) can still pass what int64 arithmetic holds
        summary = summarize(snap)
        figure = vs.snapshot_figure(snap)
        table = vs.segment_table(summary)
    except (OverflowError, ValueError) as exc:
        st.error(f"Refused: {md(src[0])}: sizes in this snapshot do not fit 64-bit arithmetic "
                 f"(a segment or block of 2^63 bytes or more?): {md(exc)}",
                 icon=":material/gpp_bad:")
        return
    node_panel.metrics_rows(vs.headlines(summary))
    st.plotly_chart(figure, key="snap_figure")
    st.dataframe(table, hide_index=True)


