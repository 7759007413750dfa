"""A KV-event recording's prefix cache for one browser session: rebuilt from the recording
up to a cap (read on from the last batch while it grows), and the notes that say what the
view covers (the cap, the window of a long recording, how the recording ended)."""
from __future__ import annotations

import streamlit as st

from kvviz.node.kvevents import rebuild
from kvviz.node.trust import plain_markdown as md
from kvviz.store import kv_reader, liveness

STATE = "kvviz_kvevents_model"  # (recording, last batch id, CacheModel) of this session
EVENT_CAP = 1_000_000  # block stores + removals one session rebuilds the cache from
STEP = 500  # batches decoded between checks of the cap
GAPS_SHOWN = 1_000  # rows of the gap table listed (all are counted)


def status_note(state: kv_reader.RunState) -> None:
    """Say how the recording ended when that was not by itself: killed, or an error."""
    if state.status == liveness.STOPPED_UNEXPECTEDLY:
        st.warning("This recording stopped unexpectedly: it still says running, but its "
                   "writer stopped committing long ago (it was killed: by its memory guard's "
                   "last resort, the OOM killer, SIGKILL). What it committed is intact and "
                   "shown below.", icon=":material/warning:")
    elif state.status == "error":
        st.error(f"This recording ended with an error: {md(state.message or 'no message')}",
                 icon=":material/error:")


def model_of(run: str, conn, counts: dict | None = None):
    """The cache rebuilt from the recording's first EVENT_CAP block stores and removals (what
    this session read so far is kept, so a live recording is read on from its last batch):
    (model, stores and removals read, those the recording holds, the t of the last batch
    read, whether those it holds are a lower bound). `counts`: kv_reader.stream_counts's, if
    read already."""
    held = st.session_state.get(STATE)
    if held is None or held[0] != run:
        held = (run, 0, None, 0)
    _, last, model, read = held
    while read < EVENT_CAP:
        model, nxt = rebuild.load_model(conn, last, model, limit=STEP)
        if nxt == last:
            break
        read, last = read + kv_reader.work_between(conn, last, nxt), nxt
    st.session_state[STATE] = (run, last, model, read)
    total, at_least = (read, False) if read < EVENT_CAP else kv_reader.work_total(
        kv_reader.stream_counts(conn) if counts is None else counts)
    if at_least:  # the counts cover a window: more is left when batches are
        at_least = kv_reader.batches_after(conn, last) > 0
    return model, read, total, kv_reader.batch_t(conn, last), at_least


def cap_note(read: int, total: int, t_last, at_least: bool = False) -> None:
    """Say that the view stops at the cap, and where."""
    if total > read or at_least:
        at = f" (up to t = {t_last:.1f} s)" if isinstance(t_last, (int, float)) else ""
        holds = (f"{total:,}" if not at_least else f"at least {total:,}" if total > read
                 else f"more than {read:,}")
        st.warning(f"This recording holds {holds} block stores and removals; the cache "
                   f"below is rebuilt from the first {read:,}{at}: this page stops reading "
                   f"once it has {EVENT_CAP:,}, to stay quick and bounded in memory. `kvviz "
                   "export` and the recording itself hold all of it.",
                   icon=":material/content_cut:")


def window_note(partial: bool, counts: dict) -> None:
    """Say which figures cover only the newest kv_reader.WINDOW batches."""
    what = ["the timeline"] if partial else []
    if any(c.get("partial") for c in counts.values()):
        what.append("the counts of streams without a final summary")
    if what:
        st.caption(f"{' and '.join(what).capitalize()}: the newest {kv_reader.WINDOW:,} "
                   "batches only (this page reads a bounded slice of a long recording).")
