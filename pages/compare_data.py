"""The Compare page's cached calls into kvviz.engine.compare. Not a page.

Caches live here, not on kvviz's functions: a loaded workload per source (a parsed upload costs
a child process) and a summary per (request, lane), so adding a lane reruns only that lane.
"""
from __future__ import annotations

import contextvars
from dataclasses import replace

import streamlit as st

from kvviz.engine import compare as cmp

TTL = "1h"  # an idle server lets go of uploads and summaries


@st.cache_resource(max_entries=4, ttl=TTL, show_spinner=False)
def loaded(source: cmp.SyntheticWorkload | cmp.UploadedTrace) -> cmp.LoadedWorkload:
    return cmp.load_workload(source)


@st.cache_data(max_entries=128, ttl=TTL, show_spinner=False)
def lane_summary(request: cmp.CompareRequest, lane: str, _progress=None) -> dict:
    one = replace(request, lanes=(lane,))
    return cmp.compare(one, loaded=loaded(request.workload), progress=_progress).summaries[0]


def compare(request: cmp.CompareRequest) -> cmp.CompareResult:
    """One lane at a time, so the bar can say which lane runs and how far it got."""
    bar = st.progress(0.0, text="starting")
    # Streamlit records st calls made inside a cached function (context variables) to replay
    # them on a hit; the bar lives outside lane_summary, so update it in the caller's context.
    outside = contextvars.copy_context()
    lanes, out = request.lanes, []
    for i, lane in enumerate(lanes):
        def tick(done: int, total: int, i: int = i, lane: str = lane) -> None:
            outside.run(bar.progress, min(1.0, (i + done / max(total, 1)) / len(lanes)),
                        text=f"lane {i + 1}/{len(lanes)} {lane}: {done}/{total} requests done")
        tick(0, 1)
        out.append(lane_summary(replace(request, lanes=()), lane, _progress=tick))
    bar.empty()
    return cmp.CompareResult(lanes, tuple(out), loaded(request.workload).engine.step_ms)
