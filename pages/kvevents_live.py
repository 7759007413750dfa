"""The Live page's event view of a lane: kvviz's own engine both ways, side by side. Under a
prefix-caching lane's block map, the KV-event stream the collector recorded for that lane
(`kvviz collect --kv-events` / `--kv-events-record`; the Live collector records it for every
prefix lane): the prefix forest in numbers, stores and evictions per second, and the
diagnoses, with the lane's own counters as the node's gauges (usage, running, waiting, and its
max-num-seqs limit). The model is rebuilt incrementally (only new batches are decoded)."""
from __future__ import annotations

import streamlit as st

from kvviz.core.blockmap import FREE
from kvviz.node.kvevents import diagnose, rebuild
from kvviz.node.kvevents.diagnose import Gauges
from kvviz.node.kvevents.model import CacheModel
from kvviz.store import kv_reader
from kvviz.viz import theme

STATE = "kvviz_live_kvevents"  # (recording path, last batch id, CacheModel) of this session
RATE_WINDOW_S = 10  # stores and evictions per second over this many seconds
WAIT_WINDOW_S = 30.0
BATCHES_PER_TICK = 20_000  # decoded per redraw at most


def _model(path: str, conn) -> CacheModel:
    """The run's model, advanced by at most BATCHES_PER_TICK batches (a day-long run opened
    late catches up over several ticks instead of stalling one)."""
    held = st.session_state.get(STATE)
    if held is None or held[0] != path:
        held = (path, 0, None)
    model, last = rebuild.load_model(conn, held[1], held[2], limit=BATCHES_PER_TICK)
    st.session_state[STATE] = (path, last, model)
    behind = kv_reader.batches_after(conn, last)
    if behind:
        st.caption(f"Reading the recorded stream: {behind:,} batches still to read.")
    return model


def _stream_of(conn, lane: str) -> int | None:
    for s in kv_reader.streams(conn):
        if isinstance(s["summary"], dict) and s["summary"].get("lane") == lane:
            return int(s["stream_id"])
    return None


def _recent(model: CacheModel, sid: int, t_now: float, window: float) -> tuple[int, int]:
    if model.t_first is None:
        return 0, 0
    end = int(t_now - model.t_first)
    rows = [model.timeline.get((sid, s)) for s in range(end - int(window) + 1, end + 1)]
    return sum(r[0] for r in rows if r), sum(r[1] for r in rows if r)


def lane_events(r, lane: str, bm, sample, t_now: float) -> None:
    """The lane's event view (nothing when the run holds no stream for it)."""
    if not r.path.is_file():
        return
    with kv_reader.connect(r.path) as conn:
        if not kv_reader.has_kv_events(conn):
            return
        sid = _stream_of(conn, lane)
        if sid is None:
            return
        model = _model(str(r.path), conn)
    mine = CacheModel()  # a view of this lane's forests only (no copy)
    mine.forests = {k: f for k, f in model.forests.items() if k.stream == sid}
    mine.t_first = model.t_first
    cached = sum(len(f.parent) for f in mine.forests.values())
    tokens = sum(f.cached_tokens for f in mine.forests.values())
    again = sum(sum(f.restores.values()) for f in mine.forests.values())
    st.markdown("##### KV events of this lane")
    s_in, r_in = _recent(model, sid, t_now, RATE_WINDOW_S)
    per_s = f"blocks a second over the last {RATE_WINDOW_S} s"
    st.html(theme.headline_html([  # a grid that wraps: no value cut short in a narrow lane
        ("Cached blocks", f"{cached:,}", "blocks the stream says are cached (evictable "
                                         "ones included)"),
        ("Cached tokens", f"{tokens:,}", "tokens in those blocks"),
        ("Stored / s", f"{s_in / RATE_WINDOW_S:.1f}", per_s + " announced stored"),
        ("Evicted / s", f"{r_in / RATE_WINDOW_S:.1f}", per_s + " announced removed")]))
    roots = sum(1 for f in mine.forests.values() for p in f.parent.values() if p is None)
    st.caption(f"{roots:,} prompts' first blocks cached; {again:,} blocks stored again after "
               f"an eviction (recomputed). The same stream `kvviz collect --kv-events` publishes "
               "over ZeroMQ; events carry hashes only, the block map beside shows the blocks.")
    gauges = Gauges(kv_usage=float((bm.owner != FREE).sum()) / max(1, bm.num_blocks),
                    num_gpu_blocks=int(bm.num_blocks), num_running=_int(sample, "running"),
                    num_waiting=_int(sample, "waiting"), max_running=_max_num_seqs(r.meta))
    lines = diagnose.diagnoses(mine, {sid: lane}) + diagnose.usage_and_waiting(
        mine, gauges, _recent(model, sid, t_now, WAIT_WINDOW_S), WAIT_WINDOW_S)
    for line in lines or ["Nothing unusual in this lane's stream."]:
        st.text(line)


def _int(sample, key: str) -> int | None:
    v = None if sample is None else sample.get(key)
    try:
        return None if v is None or v != v else int(v)
    except (TypeError, ValueError, OverflowError):  # a hand-edited counter: not a gauge
        return None


def _max_num_seqs(meta: dict) -> int | None:
    """The engine's running-batch limit from the run's metadata (None if absent or odd)."""
    engine = meta.get("engine") if isinstance(meta, dict) else None
    limit = engine.get("max_num_seqs") if isinstance(engine, dict) else None
    return limit if type(limit) is int and limit > 0 else None
