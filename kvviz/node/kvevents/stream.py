"""One subscribed stream (an endpoint's DP rank): its sockets, sequence state and counters,
and what it reports: the `--json` object (`summary`) and why it has no batch yet (`problem`).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import zmq

from kvviz.node.kvevents.endpoints import why_not_connected
from kvviz.node.kvevents.model import CacheModel


@dataclass
class Stream:
    sid: int
    endpoint: str
    dp_rank: int
    replay: str | None
    sock: zmq.Socket
    monitor: zmq.Socket
    connected: bool = False
    last_seq: int | None = None
    # (length, hash) of the last payload: the same batch twice is ignored without keeping it
    # (a frame per stream would be up to 64 MB more alive: docs/RELIABILITY.md)
    last_digest: tuple[int, int] = (0, hash(b""))
    encoding: str | None = None
    first_t: float | None = None
    batches: int = 0
    events: int = 0
    stored_blocks: int = 0
    removed_blocks: int = 0
    cleared: int = 0
    gaps: int = 0
    lost_batches: int = 0
    replayed_batches: int = 0
    undecodable: int = 0
    unknown_events: int = 0
    restarts: int = 0
    wrong_topic: int = 0
    seen_topics: set = field(default_factory=set)
    last_error: str = ""
    disconnects: int = 0
    over_cap: int = 0  # stored blocks the model did not apply (kvviz.node.kvevents.model)
    unapplied: int = 0  # batches whose model update a stop cut short (recorded in full)
    replay_after: float = 0.0  # monotonic time before which the replay socket is not asked
    joined: bool = False  # the join replay (everything from seq 0) was asked for
    join_seqs: dict | None = None  # seq -> hash(payload) of the batches the join replay gave
    join_more: bool = False  # the join replay was cut short by its wait: the rest is asked next
    join_idle: int = 0  # join slices in a row that took nothing


def digest(payload: bytes) -> tuple[int, int]:
    """What tells a payload from the stream's last one (its length and hash)."""
    return len(payload), hash(payload)


def problem(st: Stream, topic: str) -> tuple[bool, str] | None:
    """None once the stream gave a decodable batch; else (definitive, message): definitive
    (wrong topic, not a KV-event publisher) vs maybe-transient (not connected, quiet)."""
    if st.batches:
        return None
    if st.wrong_topic:
        return True, (f"{st.endpoint}: messages arrive with topic(s) {sorted(st.seen_topics)}, "
                      f"none starting with --topic {topic!r}")
    if st.undecodable:
        return True, (f"{st.endpoint}: not a KV-event publisher ({st.undecodable} messages, "
                      f"none a KV-event batch: {st.last_error})")
    if st.disconnects:
        return False, (f"{st.endpoint}: {st.disconnects} disconnect(s) before any KV-event "
                       f"batch: {st.last_error}")
    if not st.connected:
        return False, f"{st.endpoint}: cannot connect ({why_not_connected(st.endpoint)})"
    return False, (f"{st.endpoint}: connected, but no KV events yet (is the engine started "
                   "with KV events enabled, and busy?)")


def summary(st: Stream, model: CacheModel) -> dict:
    """The stream's `--json` object (also its kv_streams.summary_json)."""
    return {"endpoint": st.endpoint, "dp_rank": st.dp_rank, "encoding": st.encoding,
            "batches": st.batches, "events": st.events, "stored_blocks": st.stored_blocks,
            "removed_blocks": st.removed_blocks, "cleared": st.cleared,
            "cached_blocks": model.cached_blocks(st.sid),
            "unconfirmed_blocks": model.unconfirmed_blocks(st.sid),
            "cached_tokens": model.cached_tokens(st.sid),
            "re_announced_blocks": sum(f.duplicates for _, f in model.of_stream(st.sid)),
            "gaps": st.gaps, "replayed_batches": st.replayed_batches,
            "undecodable": st.undecodable, "unknown_events": st.unknown_events,
            "lost_batches": st.lost_batches, "restarts": st.restarts,
            "wrong_topic": st.wrong_topic, "disconnects": st.disconnects,
            "over_cap": st.over_cap, "unapplied": st.unapplied}
