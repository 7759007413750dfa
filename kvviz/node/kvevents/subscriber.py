"""Subscribe to KV-event publishers: one SUB socket per (endpoint, DP rank), seq tracking.

A message is `[topic, seq (8 bytes big-endian), payload]`. Per stream: a seq above last + 1
is a gap (filled from the ROUTER replay socket when one is given; vLLM 0.32's answer layout
and the older one are both read: kvviz.node.kvevents.replay), a seq below the last one (or
the same seq with another payload) is a publisher restart (its cache starts empty: the
stream's forests are cleared), the same message twice is ignored. With a replay endpoint, a
subscriber asks for everything from seq 0 as soon as it connects (it joins with the node's true
cache, even an idle node's), and again before its first live batch when that found nothing and
the batch has seq > 0. Every message is recorded raw; what does not decode is counted
("undecodable"), never raised.
ZeroMQ connects lazily, so a socket monitor tells an unreachable address from a quiet one.

Bounds (docs/RELIABILITY.md, "KV-event streams"): a frame larger than the config's
max_message_bytes makes ZeroMQ drop the connection before it is buffered (counted as a
disconnect; the publisher's seqs then show the gap); each SUB socket queues at most
rcv_hwm(...) messages, so the receive queues hold at most RECEIVE_BUDGET bytes (then ZeroMQ
pushes back on TCP and the publisher drops, which the seqs show as gaps); a replay request
waits at most replay_timeout_s and takes at most REPLAY_MAX_BYTES; a replay socket that
failed is not asked again for REPLAY_BACKOFF_S, one that answered not before as long again
as the answer took (so replays take at most half the time under a flood of gaps); `poll`
returns within about POLL_BUDGET_S plus one message's handling, and `should_stop` (set by
the caller) ends a replay wait.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import zmq
from zmq.utils.monitor import recv_monitor_message

from kvviz.node.kvevents import replay as replay_wire
from kvviz.node.kvevents.decode import CLEARED, REMOVED, STORED, Undecodable, decode
from kvviz.node.kvevents.endpoints import (  # noqa: F401  (re-exported)
    SubscriberConfig,
    check_endpoint,
    check_fd_limit,
    endpoint_for_rank,
    why_not_connected,
)
from kvviz.node.kvevents.model import CacheModel
from kvviz.node.kvevents.store import KvEventWriter

END_SEQ = replay_wire.END_SEQ
RAW_KEPT = 1 << 20  # bytes of an undecodable message kept in the recording
RECEIVE_BUDGET = 256 << 20  # bytes all SUB queues may hold together (2 frames per message)
REPLAY_MAX_BYTES = 64 << 20  # of one replay answer; the rest is not read
REPLAY_BACKOFF_S = 5.0  # a replay socket that timed out or failed is left alone this long
# The join replay (on connecting) holds up live messages while it waits: a short wait; a
# join cut short leaves a gap that the first live batch fills from the replay socket.
JOIN_TIMEOUT_S = 0.5
POLL_BUDGET_S = 0.1
SLICE_MS = 100  # the longest single wait: should_stop is checked between slices


def rcv_hwm(streams: int, max_message_bytes: int) -> int:
    """Messages each SUB socket may queue: RECEIVE_BUDGET over the worst case (two frames of
    max_message_bytes per message), within [2, 1000]."""
    return max(2, min(1000, RECEIVE_BUDGET // max(1, 2 * streams * max_message_bytes)))


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
    last_payload: bytes = b""
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
    replay_after: float = 0.0  # monotonic time before which the replay socket is not asked
    joined: bool = False  # the join replay (everything from seq 0) was asked for
    join_seqs: dict | None = None  # seq -> hash(payload) of the batches the join replay gave


class Subscriber:
    def __init__(self, cfg: SubscriberConfig, writer: KvEventWriter | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.cfg = cfg
        self.writer = writer
        self.clock = clock
        self.t0 = clock()
        self.model = CacheModel()
        self.ctx = zmq.Context()
        self.ctx.linger = 0  # a context left to the GC must not wait on unsent messages
        self.poller = zmq.Poller()
        self.streams: list[Stream] = []
        self._by_sock: dict[zmq.Socket, Stream] = {}
        self._topic = cfg.topic.encode()
        self.should_stop: Callable[[], bool] = lambda: False  # ends replay waits early
        n = len(cfg.endpoints) * cfg.dp_ranks
        self._hwm = rcv_hwm(n, cfg.max_message_bytes)
        try:
            check_fd_limit(n)
            self.ctx.set(zmq.MAX_SOCKETS, max(1024, 3 * n + 64))
            for i, ep in enumerate(cfg.endpoints):
                for r in range(cfg.dp_ranks):
                    self._add(endpoint_for_rank(ep, r), r,
                              endpoint_for_rank(cfg.replay[i], r) if cfg.replay else None)
        except BaseException:
            self.close()
            raise

    def _add(self, endpoint: str, rank: int, replay: str | None) -> None:
        sock = self.ctx.socket(zmq.SUB)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.RCVHWM, self._hwm)
        sock.setsockopt(zmq.MAXMSGSIZE, self.cfg.max_message_bytes)
        try:
            mon = sock.get_monitor_socket(zmq.EVENT_CONNECTED | zmq.EVENT_DISCONNECTED)
        except zmq.ZMQError as exc:
            sock.close()
            raise ValueError(f"{endpoint}: cannot monitor the socket ({exc})") from None
        try:
            sock.connect(endpoint)
        except zmq.ZMQError as exc:
            sock.disable_monitor()
            mon.close()
            sock.close()
            raise ValueError(f"{endpoint}: ZeroMQ refuses the address ({exc.strerror})") \
                from None
        sock.setsockopt(zmq.SUBSCRIBE, b"")  # topics are checked here, to name a mismatch
        sid = self.writer.add_stream(endpoint, rank, self.cfg.topic, replay) if self.writer \
            else len(self.streams) + 1
        st = Stream(sid, endpoint, rank, replay, sock, mon)
        self.streams.append(st)
        self._by_sock[sock] = st
        self.poller.register(sock, zmq.POLLIN)
        self.poller.register(mon, zmq.POLLIN)

    # ---- receiving ------------------------------------------------------------------------
    def poll(self, timeout_ms: int = 100, max_messages: int = 10_000) -> int:
        """Handle what arrives within timeout_ms; returns the number of messages handled.
        Returns after about POLL_BUDGET_S of handling (shared by the streams with messages),
        or when should_stop() says so."""
        n = 0
        ready = self.poller.poll(min(timeout_ms, SLICE_MS))
        share = POLL_BUDGET_S / max(1, sum(s in self._by_sock for s, _ in ready))
        for sock, _ in ready:
            st = self._by_sock.get(sock)
            if st is None:
                self._monitor_event(sock)
                continue
            end = time.monotonic() + share  # each ready stream its share: no starving
            while n < max_messages and time.monotonic() < end and not self.should_stop():
                try:
                    frames = sock.recv_multipart(zmq.NOBLOCK)
                except zmq.Again:
                    break
                self.handle(st, frames)
                n += 1
        return n

    def _monitor_event(self, mon: zmq.Socket) -> None:
        st = next(s for s in self.streams if s.monitor is mon)
        while True:
            try:
                ev = recv_monitor_message(mon, zmq.NOBLOCK)
            except zmq.Again:
                return
            if ev["event"] == zmq.EVENT_CONNECTED:
                st.connected = True
                if st.replay and st.last_seq is None and not st.joined:
                    self._join(st)
            elif ev["event"] == zmq.EVENT_DISCONNECTED:
                if st.connected:
                    st.disconnects += 1
                    st.last_error = (f"the connection dropped (a frame over "
                                     f"{self.cfg.max_message_bytes} bytes, or the publisher "
                                     "went away)")
                st.connected = False

    def handle(self, st: Stream, frames: list[bytes]) -> None:
        t = self.clock() - self.t0
        if len(frames) != 3 or len(frames[1]) != 8:
            st.undecodable += 1
            st.last_error = f"a message of {len(frames)} frames, not [topic, seq, payload]"
            self._record(st, -1, t, None, b"".join(frames[:4])[:RAW_KEPT],
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
        last = st.last_seq
        if last is None and seq > 0 and st.replay and self._may_replay(st):  # joined late
            self._replay(st, 0, seq - 1, t)
        elif last is not None:
            if seq == last and payload == st.last_payload:
                return  # the same batch twice
            if seq <= last:
                st.restarts += 1
                self._gap(st, t, "restart", seq, last, False)
                self.model.restart(st.sid)
            elif seq > last + 1:
                self._fill(st, t, last + 1, seq - 1)
        self._ingest(st, seq, payload, topic, t, False)
        st.last_seq, st.last_payload = seq, payload

    def _ingest(self, st: Stream, seq: int, payload: bytes, topic: bytes | None, t: float,
                replayed: bool) -> None:
        try:
            b = decode(payload)
        except Undecodable as exc:
            st.undecodable += 1
            st.last_error = str(exc)
            self._record(st, seq, t, None, payload[:RAW_KEPT], topic, replayed)
            return
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
        self.model.apply(st.sid, rank, b.events, t)
        st.over_cap += self.model.over_cap - capped
        if self.writer is not None:
            self.writer.add_batch((st.sid, seq, t, b.ts, rank, len(b.events), ns, nr, nc,
                                   b.unknown, int(replayed), "ok", topic, payload))

    def _record(self, st: Stream, seq: int, t: float, rank: int | None, payload: bytes,
                topic: bytes | None, replayed: bool) -> None:
        if self.writer is not None:
            self.writer.add_batch((st.sid, seq, t, None, rank, 0, 0, 0, 0, 0, int(replayed),
                                   "undecodable", topic, payload))

    def _gap(self, st: Stream, t: float, kind: str, first: int, last: int, filled: bool) -> None:
        if self.writer is not None:
            self.writer.add_gap(st.sid, t, kind, first, last, filled)

    def _fill(self, st: Stream, t: float, first: int, last: int) -> None:
        st.gaps += 1
        got = self._replay(st, first, last, t) if st.replay and self._may_replay(st) else 0
        missing = last - first + 1 - got
        st.lost_batches += missing
        self._gap(st, t, "gap", first, last, missing == 0)

    def _may_replay(self, st: Stream) -> bool:
        return time.monotonic() >= st.replay_after and not self.should_stop()
    def _join(self, st: Stream) -> None:
        """On first connecting: everything the replay buffer holds, from seq 0, so that a
        subscriber joining a busy (or idle) node starts with its true cache."""
        st.joined = True
        st.join_seqs = {}
        self._replay(st, 0, 2**63 - 1, self.clock() - self.t0,
                     min(self.cfg.replay_timeout_s, JOIN_TIMEOUT_S))
        if st.join_seqs:
            st.last_seq = max(st.join_seqs)
        else:
            st.join_seqs = None

    def _replay(self, st: Stream, first: int, last: int, t: float,
                timeout_s: float | None = None) -> int:
        """Ask the replay socket for batches from `first`; ingest those up to `last`.
        Bounded: replay_timeout_s, REPLAY_MAX_BYTES, should_stop(); a failure backs off."""
        sock = self.ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.MAXMSGSIZE, self.cfg.max_message_bytes)
        sock.setsockopt(zmq.RCVHWM, 2)
        got = taken = 0
        ok, t_start = False, time.monotonic()
        try:
            sock.connect(st.replay)  # type: ignore[arg-type]
            sock.send_multipart(replay_wire.request(first), zmq.NOBLOCK)
            deadline = time.monotonic() + (self.cfg.replay_timeout_s if timeout_s is None
                                           else timeout_s)
            while True:
                left = deadline - time.monotonic()
                if left <= 0 or self.should_stop():
                    st.last_error = f"replay from {st.replay}: no end marker in time"
                    break
                if not sock.poll(min(SLICE_MS, int(left * 1000) + 1)):
                    continue
                fr = sock.recv_multipart()
                taken += sum(map(len, fr))
                if taken > REPLAY_MAX_BYTES:
                    st.last_error = (f"replay from {st.replay}: answer larger than "
                                     f"{REPLAY_MAX_BYTES} bytes")
                    break
                ans = replay_wire.parse_answer(fr)
                if ans is None:
                    st.last_error = f"replay from {st.replay}: a malformed answer"
                    break
                if ans.seq == END_SEQ:
                    ok = True
                    break
                if ans.topic and self._topic and not ans.topic.startswith(self._topic):
                    continue
                if first <= ans.seq <= last:
                    if st.join_seqs is not None and st.last_seq is None:
                        st.join_seqs[ans.seq] = hash(ans.payload)
                        st.last_payload = ans.payload
                    self._ingest(st, ans.seq, ans.payload, ans.topic, t, True)
                    st.replayed_batches += 1
                    got += 1
        except zmq.ZMQError as exc:
            st.last_error = f"replay from {st.replay}: {exc.strerror}"
        finally:
            sock.close()
            now = time.monotonic()
            st.replay_after = now + (now - t_start if ok else REPLAY_BACKOFF_S)
        return got

    # ---- reporting ------------------------------------------------------------------------
    def problems(self) -> dict[int, tuple[bool, str]]:
        """Streams with no decodable batch yet: sid -> (definitive, message). Definitive
        (wrong topic, not a KV-event publisher) vs maybe-transient (not connected, quiet)."""
        out = {}
        for st in self.streams:
            if st.batches:
                continue
            if st.wrong_topic:
                out[st.sid] = (True, f"{st.endpoint}: messages arrive with topic(s) "
                                     f"{sorted(st.seen_topics)}, none starting with --topic "
                                     f"{self.cfg.topic!r}")
            elif st.undecodable:
                out[st.sid] = (True, f"{st.endpoint}: not a KV-event publisher ({st.undecodable} "
                                     f"messages, none a KV-event batch: {st.last_error})")
            elif st.disconnects:
                out[st.sid] = (False, f"{st.endpoint}: {st.disconnects} disconnect(s) "
                                      f"before any KV-event batch: {st.last_error}")
            elif not st.connected:
                why = why_not_connected(st.endpoint)
                out[st.sid] = (False, f"{st.endpoint}: cannot connect ({why})")
            else:
                out[st.sid] = (False, f"{st.endpoint}: connected, but no KV events yet (is the "
                                      "engine started with KV events enabled, and busy?)")
        return out

    def summary(self) -> list[dict]:
        return [{"endpoint": st.endpoint, "dp_rank": st.dp_rank, "encoding": st.encoding,
                 "batches": st.batches, "events": st.events, "stored_blocks": st.stored_blocks,
                 "removed_blocks": st.removed_blocks, "cleared": st.cleared,
                 "cached_blocks": self.model.cached_blocks(st.sid),
                 "cached_tokens": self.model.cached_tokens(st.sid),
                 "re_announced_blocks": sum(f.duplicates for _, f in
                                            self.model.of_stream(st.sid)),
                 "gaps": st.gaps,
                 "replayed_batches": st.replayed_batches, "undecodable": st.undecodable,
                 "unknown_events": st.unknown_events, "lost_batches": st.lost_batches,
                 "restarts": st.restarts, "wrong_topic": st.wrong_topic,
                 "disconnects": st.disconnects, "over_cap": st.over_cap}
                for st in self.streams]

    def close(self) -> None:
        for st in self.streams:
            st.sock.disable_monitor()
            st.monitor.close()
            st.sock.close()
        self.ctx.destroy(linger=0)  # any socket left open would make term() wait forever

