"""GPU: device memory over time (NVML), torch's allocator against the KV pool size."""
from __future__ import annotations

import streamlit as st

from kvviz.core.errors import KvvizError
from kvviz.node.nvml import probe_devices
from kvviz.node.trust import plain_markdown as md
from kvviz.runs import directory
from kvviz.torchsnap import load_snapshot_sandboxed, summarize
from kvviz.viz import gpu as vg
from kvviz.viz import torchsnap as vs
from pages import recording, runpicker


def kv_pool_bytes(meta: dict) -> int | None:
    """Sum over lanes of capacity x bytes per token, as the recording's metadata states it."""
    total = 0
    for lane in meta.get("lanes", []):
        try:
            total += int(lane.get("capacity_tokens", 0)) * int(lane.get("bytes_per_token", 0))
        except (TypeError, ValueError):
            continue
    return total or None


def this_machine() -> None:
    probe = probe_devices()
    if probe["ok"]:
        for d in probe["devices"]:
            st.success(f"NVML on this machine: GPU {d['index']} {d['name']}: "
                       f"{d['used_bytes'] / 2**30:.1f} of {d['total_bytes'] / 2**30:.1f} GiB "
                       "used", icon=":material/memory:")
    else:
        st.info(f"NVML is unavailable on the machine running this dashboard: "
                f"**{probe['error']}** (no NVIDIA driver library here; a CPU-only machine)",
                icon=":material/info:")
        st.markdown(ON_A_GPU)


ON_A_GPU = """**What this page shows on a machine with an NVIDIA GPU** (a collector in real mode
on CUDA): device memory over time as NVML reports it (total, used, free, reserved by the
driver, and the collector's own process), PyTorch's caching allocator (allocated, reserved,
peak) against the size of the KV pools the lanes were given, so you can see how much of the
GPU the KV cache takes and what else holds memory; and the collector's PyTorch allocator
snapshots (`--torch-snapshot-every S`). On this CPU machine there is no device memory to
read: the page shows why, and the KV pools' size against the collector's own host memory.
For the KV cache itself, see Live and Replay; for a GPU server elsewhere, Node."""


@st.fragment(run_every=2.0)
def panel(run: str | None) -> None:
    if run is None:
        st.info("No recording yet: start the live collector or put a recording in runs/.")
        return
    with recording.reader(run) as r:
        if r is None:
            return
        with recording.guard(f"Reading {run}"):
            meta = r.meta
            st.caption(f"Recording `{run}`: mode **{meta.get('mode', '?')}**, device "
                       f"**{meta.get('device', '?')}**, status {r.state or 'unknown'}")
            df = r.device_memory()
            reason = vg.nvml_reason(df, meta)
            if reason:
                st.warning(f"NVML unavailable for this recording: **{reason}**. Device memory "
                           "is read through NVML, which needs an NVIDIA GPU and driver.",
                           icon=":material/warning:")
            pool = kv_pool_bytes(meta)
            if pool:
                st.metric("KV pool size (all lanes)", f"{pool / 2**20:,.1f} MiB",
                          help="capacity tokens x bytes per token, summed over lanes")
            if df.empty:
                st.info("The recording has no device-memory samples.")
                return
            has_series = any(c in df for c in (*vg.NVML_SERIES, *vg.TORCH_SERIES)) or \
                vg.other_byte_columns(df)
            devs = vg.devices(df)
            dev = st.selectbox("GPU", devs, key="gpu_device") if len(devs) > 1 else None
            if has_series:
                st.plotly_chart(vg.device_memory_figure(df, pool, dev), key="gpu_memory")
            else:
                st.info("No memory series recorded (only the reason above).")


def torch_snapshots(run: str | None) -> None:
    """The collector's own torch memory snapshots (`--torch-snapshot-every`, CUDA only)."""
    if not run:
        return
    stem = run.rsplit(".", 1)[0]
    files = [f for f in directory.snapshot_files(directory.runs_dir())
             if f.startswith(f"{stem}-torchsnap-")]
    st.subheader("PyTorch allocator snapshots of the collector")
    if not files:
        st.caption("None for this recording: start a CUDA collector with "
                   "`--torch-snapshot-every S` to take them.")
        return
    pick = st.selectbox("Snapshot", files, key="gpu_torchsnap")
    try:  # the restricted loader: a snapshot file is a pickle, never pickle.load it
        path = directory.resolve_snapshot(directory.runs_dir(), pick)
        snap = load_snapshot_sandboxed(path)  # in a limited child process
    except KvvizError as exc:
        st.error(f"{md(pick)}: {md(exc)}")
        return
    cols = st.columns(4)
    for col, h in zip(cols * 2, vs.headlines(summarize(snap))):
        col.metric(h.label, h.value, help=h.help)
    st.plotly_chart(vs.snapshot_figure(snap), key="gpu_torchsnap_fig")


sel = runpicker.sidebar("pages/gpu.py")
st.title("GPU memory")
st.caption("NVML device memory (total, used, free, reserved, the collector's process) and "
           "torch's caching allocator against the KV pool the lanes were given.")
this_machine()
panel(sel.run)
torch_snapshots(sel.run)
