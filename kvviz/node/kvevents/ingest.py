"""What one message does to its stream: seq tracking, gaps and replays, decode, the cache
model, the recording (the Subscriber's half that never touches a socket but a replay's).

A message is `[topic, seq (8 bytes big-endian), payload]`. Per stream: a seq above last + 1
is a gap (filled from the ROUTER replay socket when one is given; vLLM 0.32's answer layout
and the older one are both read: kvviz.node.kvevents.replay), a seq below the last one (or
the same seq with another payload) is a publisher restart (its cache starts empty: the
stream's forests are cleared), the same message twice is ignored. With a replay endpoint, a
subscriber asks for everything from seq 0 as soon as it connects (`_join`: it joins with the
node's true cache, even an idle node's), in slices of JOIN_TIMEOUT_S so live messages wait
little: a slice cut short is continued by the next poll (`join_rest`), or by the first live
batch past it (the rest of a join, not a gap), and asked from seq 0 before the first live
batch when the join found nothing and the batch has seq > 0. Every message is recorded
raw; what does not decode is counted ("undecodable"), never raised.

Bounds (docs/RELIABILITY.md, "KV-event streams"): one message in hand decodes into at most
decode.decoded_bound(its size) bytes, one decoded batch alive at a time (`_apply`), the rows
waiting written before a payload of FLUSH_FIRST bytes decodes, and the memory guard asked
first (kvviz.node.kvevents.guard); replays are bounded by kvviz.node.kvevents.replay.fetch,
and a replay socket that failed is not asked again for REPLAY_BACKOFF_S, one that answered
not before as long again as the answer took (so replays take at most half the time under a
flood of gaps); a huge batch's model update looks at `_halt` every APPLY_SLICE events.
"""
from __future__ import annotations

import time

from kvviz.node.kvevents import replay as replay_wire
from kvviz.node.kvevents.decode import (
    CLEARED,
    DECODED_PER_BYTE,
    GENERIC_MAX_BYTES,
    REMOVED,
    STORED,
    Undecodable,
    decode,
    pieces,
)
from kvviz.node.kvevents.stream import Stream, digest

RAW_KEPT = 1 << 20  # bytes of an undecodable message kept in the recording
REPLAY_BACKOFF_S = 5.0  # a replay socket that timed out or failed is left alone this long
# The join replay (on connecting) holds up live messages while it waits: it is taken in
# slices of this long, each poll the next one (a loaded node answers 450 batches slowly).
JOIN_TIMEOUT_S = 0.5
JOIN_IDLE_SLICES = 2  # join slices in a row that took nothing: polls leave the rest to live
APPLY_SLICE = 20_000  # block hashes applied to the model between two looks at should_stop
FLUSH_FIRST = 1 << 20  # a payload this large: the rows waiting are written before it decodes
assert FLUSH_FIRST > GENERIC_MAX_BYTES  # so one that large decodes on the typed path only


class Ingest:
    """Subscriber's message half (kvviz.node.kvevents.subscriber sets what it reads: cfg,
    writer, model, guard, clock, t0, ctx, frame_bytes, _topic, _halt, _check_guard)."""

    def handle(self, st: Stream, frames: list[bytes], count: int | None = None) -> None:
        """One message: its first frames (`count` of them in all, when more were dropped)."""
        t = self.clock() - self.t0
        count = len(frames) if count is None else count
        if count != 3 or len(frames[1]) != 8:
            st.undecodable += 1
            st.last_error = f"a message of {count} frames, not [topic, seq, payload]"
            self._record(st, -1, t, None, b"".join(f[:RAW_KEPT] for f in frames[:4])[:RAW_KEPT],
                         frames[0] if frames else None, False)
            return
        topic, seq_b, payload = frames
        if self._topic and not topic.startswith(self._topic):
            st.wrong_topic += 1
            if len(st.seen_topics) < 8:
                st.seen_topics.add(topic.decode("utf-8", "replace")[:80])
            return
        seq = int.from_bytes(seq_b, "big", signed=True)
        if st.join_seqs is not None:
            if st.join_seqs.get(seq) == hash(payload):
                return  # published while kvviz joined: the join replay gave it already
            st.join_seqs = None  # past the replayed ones (or a restart): live from here
        rest_of_join, st.join_more = st.join_more, False  # this batch takes the join's rest
        last = st.last_seq
        if last is None and seq > 0 and st.replay and self._may_replay(st):  # joined late
            self._replay(st, 0, seq - 1, t)
        elif last is not None:
            if seq == last and digest(payload) == st.last_digest:
                return  # the same batch twice
            if seq <= last:
                st.restarts += 1
                self._gap(st, t, "restart", seq, last, False)
                self.model.restart(st.sid)
            elif seq > last + 1:
                self._fill(st, t, last + 1, seq - 1, rest_of_join)
        self._ingest(st, seq, payload, topic, t, False)
        st.last_seq, st.last_digest = seq, digest(payload)

    def _ingest(self, st: Stream, seq: int, payload: bytes, topic: bytes | None, t: float,
                replayed: bool) -> None:
        """Decode and apply (_apply), then record: the rows waiting (and SQLite's copies of
        them in a flush) never coexist with a large decoded batch (docs/RELIABILITY.md)."""
        if self.writer is not None and len(payload) >= FLUSH_FIRST:
            self.writer.flush()
        if self.guard is not None and len(payload) >= FLUSH_FIRST and \
                self.guard.would_pass(DECODED_PER_BYTE * len(payload)):  # typed path only
            self._record(st, seq, t, None, payload, topic, replayed)  # kept whole, undecoded
            self._check_guard()  # its decode would take the process past the limit
        try:
            counts = self._apply(st, seq, payload, t)
        except Undecodable as exc:
            st.undecodable += 1
            st.last_error = str(exc)
            self._record(st, seq, t, None, payload[:RAW_KEPT], topic, replayed)
            return
        if self.writer is not None:
            self.writer.add_batch((st.sid, seq, t, *counts, int(replayed), "ok", topic,
                                   payload))

    def _apply(self, st: Stream, seq: int, payload: bytes, t: float) -> tuple:
        """Decode, count and apply one payload (the decoded batch lives only here); the
        row's (ts, rank, events, stored, removed, cleared, unknown). A seq that skips some
        makes the blocks cached before it unconfirmed (CacheModel.note_seq), as a rebuild
        from the recording does (kvviz.node.kvevents.rebuild)."""
        b = decode(payload)
        self.model.note_seq(st.sid, seq)
        if st.first_t is None:
            st.first_t = t
        if st.encoding is None and b.encoding != "empty":
            st.encoding = b.encoding
        elif b.encoding not in ("empty", st.encoding):
            st.encoding = "mixed"
        ns = nr = nc = 0
        for ev in b.events:
            if ev.kind == STORED:
                ns += len(ev.hashes)
            elif ev.kind == REMOVED:
                nr += len(ev.hashes)
            elif ev.kind == CLEARED:
                nc += 1
        st.batches += 1
        st.events += len(b.events)
        st.stored_blocks += ns
        st.removed_blocks += nr
        st.cleared += nc
        st.unknown_events += b.unknown
        rank = st.dp_rank if b.dp_rank is None else b.dp_rank
        capped = self.model.over_cap
        for k, part in enumerate(pieces(b.events, APPLY_SLICE)):  # a huge batch yields
            if k and self._halt():
                st.unapplied += 1
                break
            self.model.apply(st.sid, rank, part, t)
        st.over_cap += self.model.over_cap - capped
        return b.ts, rank, len(b.events), ns, nr, nc, b.unknown

    def _record(self, st: Stream, seq: int, t: float, rank: int | None, payload: bytes,
                topic: bytes | None, replayed: bool) -> None:
        if self.writer is not None:
            self.writer.add_batch((st.sid, seq, t, None, rank, 0, 0, 0, 0, 0, int(replayed),
                                   "undecodable", topic, payload))

    def _gap(self, st: Stream, t: float, kind: str, first: int, last: int, filled: bool) -> None:
        if self.writer is not None:
            self.writer.add_gap(st.sid, t, kind, first, last, filled)

    def _fill(self, st: Stream, t: float, first: int, last: int, rest_of_join: bool = False
              ) -> None:
        """Seqs first..last missing before a live batch: replayed when a replay socket is
        given. The rest of a join cut short is no gap unless some of it is lost."""
        got = self._replay(st, first, last, t).got if st.replay and self._may_replay(st) else 0
        missing = last - first + 1 - got
        if rest_of_join and missing == 0:
            return
        st.gaps += 1
        st.lost_batches += missing
        self._gap(st, t, "gap", first, last, missing == 0)

    def _may_replay(self, st: Stream) -> bool:
        return time.monotonic() >= st.replay_after and not self._halt()

    def _join(self, st: Stream) -> None:
        """On first connecting: everything the replay buffer holds, from seq 0, so that a
        subscriber joining a busy (or idle) node starts with its true cache."""
        st.joined = True
        st.join_seqs = {}
        self.join_rest(st)

    def join_rest(self, st: Stream) -> int:
        """One slice of the join replay, from the seq after the last one taken (at most
        JOIN_TIMEOUT_S): a slice cut short by that wait leaves `join_more` set, for the next
        poll (until JOIN_IDLE_SLICES in a row took nothing) or the first live batch. Returns
        the batches taken."""
        first = 0 if st.last_seq is None else st.last_seq + 1
        res = self._replay(st, first, 2**63 - 1, self.clock() - self.t0,
                           min(self.cfg.replay_timeout_s, JOIN_TIMEOUT_S), join=True)
        st.join_more = res.timed_out  # the rest: the next poll's, or the first live batch's
        st.join_idle = 0 if res.got else st.join_idle + 1  # polls stop asking a silent one
        if res.timed_out:  # cut short by its own short wait, not a failure: no backoff
            st.replay_after = time.monotonic()
        if st.join_seqs:
            st.last_seq = max(st.join_seqs)
        elif not st.join_more:
            st.join_seqs = None
        return res.got

    def _replay(self, st: Stream, first: int, last: int, t: float,
                timeout_s: float | None = None, join: bool = False) -> replay_wire.Fetched:
        """Ask the replay socket for batches from `first`; ingest those up to `last`
        (kvviz.node.kvevents.replay.fetch: bounded in time and bytes); a failure backs off.
        `join`: a slice of the join replay (its seqs are noted in join_seqs)."""
        def take(ans: replay_wire.ReplayFrame) -> None:
            if join and st.join_seqs is not None:
                st.join_seqs[ans.seq] = hash(ans.payload)
                st.last_digest = digest(ans.payload)
            self._ingest(st, ans.seq, ans.payload, ans.topic, t, True)
            st.replayed_batches += 1

        t_start = time.monotonic()
        res = replay_wire.fetch(
            self.ctx, st.replay, first, last, frame_bytes=self.frame_bytes, topic=self._topic,
            timeout_s=self.cfg.replay_timeout_s if timeout_s is None else timeout_s,
            should_stop=self._halt, take=take)
        if not res.ok:
            st.last_error = res.error
        now = time.monotonic()
        st.replay_after = now + (now - t_start if res.ok else REPLAY_BACKOFF_S)
        return res
