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

Bounds (docs/RELIABILITY.md, "KV-event streams"), which keep the process under about 1 GB
whatever the publishers send in messages of a few frames (ZeroMQ caps each frame, not how
many a message has: a command's MemoryGuard, kvviz.node.kvevents.guard, wakes `poll`, which
closes the sockets and raises MemoryLimit; a message's frames past KEPT_FRAMES are dropped as
read): frames and HWMs from endpoints.queue_bounds (the
config's max_message_bytes, lowered when many streams share the budget), so the receive
queues, the message in hand and a replay fetch's frames hold at most
endpoints.RECEIVE_BUDGET bytes (a larger frame makes ZeroMQ drop the connection before it is
buffered, counted as a disconnect; a full queue pushes back on TCP and the publisher drops,
which the seqs show as gaps and lost batches); one message in hand decodes into at most
decode.decoded_bound(its size) bytes, one decoded batch alive at a time (_apply); replays
are bounded by kvviz.node.kvevents.replay.fetch, and a replay socket that failed is not
asked again for REPLAY_BACKOFF_S, one that answered not before as long again as the answer
took (so replays take at most half the time under a flood of gaps). `poll` returns within
about POLL_BUDGET_S plus one message's handling; `should_stop` (set by the caller) ends a
replay wait and a huge batch's model update (APPLY_SLICE events at a time).
"""
from __future__ import annotations

import time
from collections.abc import Callable

import zmq
from zmq.utils.monitor import recv_monitor_message

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
from kvviz.node.kvevents.endpoints import (  # SubscriberConfig is imported from here too
    SubscriberConfig,
    check_fd_limit,
    endpoint_for_rank,
    queue_bounds,
)
from kvviz.node.kvevents.guard import MemoryGuard, MemoryLimit
from kvviz.node.kvevents.model import CacheModel
from kvviz.node.kvevents.stream import Stream, digest, problem, summary
from kvviz.store.kv_writer import KvEventWriter

END_SEQ = replay_wire.END_SEQ
RAW_KEPT = 1 << 20  # bytes of an undecodable message kept in the recording
KEPT_FRAMES = 4  # frames of a message read into Python; the rest are counted and dropped
REPLAY_BACKOFF_S = 5.0  # a replay socket that timed out or failed is left alone this long
# The join replay (on connecting) holds up live messages while it waits: a short wait; a
# join cut short leaves a gap that the first live batch fills from the replay socket.
JOIN_TIMEOUT_S = 0.5
POLL_BUDGET_S = 0.1
SLICE_MS = replay_wire.SLICE_MS
APPLY_SLICE = 20_000  # block hashes applied to the model between two looks at should_stop
FLUSH_FIRST = 1 << 20  # a payload this large: the rows waiting are written before it decodes
assert FLUSH_FIRST > GENERIC_MAX_BYTES  # so one that large decodes on the typed path only


def _recv(sock: zmq.Socket) -> tuple[list[bytes], int]:
    """One message's first KEPT_FRAMES frames and how many it had: the rest are dropped as
    they are read, so a message of many frames is not held whole a second time."""
    frames = [sock.recv(zmq.NOBLOCK)]
    count = 1
    while sock.getsockopt(zmq.RCVMORE):
        if count < KEPT_FRAMES:
            frames.append(sock.recv())
        else:
            sock.recv(copy=False)
        count += 1
    return frames, count


class Subscriber:
    def __init__(self, cfg: SubscriberConfig, writer: KvEventWriter | None = None,
                 clock: Callable[[], float] = time.time,
                 guard: MemoryGuard | None = None) -> None:
        self.cfg = cfg
        self.guard = guard if guard is not None and guard.enabled else None
        self._closed = False
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
        if self.guard is not None:
            self.poller.register(self.guard.wake_fd, zmq.POLLIN)  # a trip wakes poll
        n = len(cfg.endpoints) * cfg.dp_ranks
        self._hwm, self.frame_bytes = queue_bounds(n, cfg.max_message_bytes, bool(cfg.replay))
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
        sock.setsockopt(zmq.MAXMSGSIZE, self.frame_bytes)
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
        self._check_guard()
        ready = self.poller.poll(min(timeout_ms, SLICE_MS))
        self._check_guard()
        share = POLL_BUDGET_S / max(1, sum(s in self._by_sock for s, _ in ready))
        for sock, _ in ready:
            st = self._by_sock.get(sock)
            if st is None:
                self._monitor_event(sock)
                continue
            end = time.monotonic() + share  # each ready stream its share: no starving
            while n < max_messages and time.monotonic() < end and not self._halt():
                try:
                    frames, count = _recv(sock)
                except zmq.Again:
                    break
                self.handle(st, frames, count)
                n += 1
        self._check_guard()
        return n

    def _halt(self) -> bool:
        """should_stop(), or the memory guard tripped (kvviz.node.kvevents.guard)."""
        return self.should_stop() or self.guard is not None and self.guard.tripped is not None

    def _check_guard(self) -> None:
        """A tripped guard: close the sockets (ZeroMQ frees what it buffered), tell the
        guard, raise MemoryLimit naming the cause."""
        if self.guard is not None and self.guard.tripped is not None:
            self.close(self.guard.released)  # released once the sockets are: growth ends
            raise MemoryLimit(self.guard.tripped)

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
                                     f"{self.frame_bytes} bytes, or the publisher went away)")
                st.connected = False

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
                self._fill(st, t, last + 1, seq - 1)
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
            counts = self._apply(st, payload, t)
        except Undecodable as exc:
            st.undecodable += 1
            st.last_error = str(exc)
            self._record(st, seq, t, None, payload[:RAW_KEPT], topic, replayed)
            return
        if self.writer is not None:
            self.writer.add_batch((st.sid, seq, t, *counts, int(replayed), "ok", topic,
                                   payload))

    def _apply(self, st: Stream, payload: bytes, t: float) -> tuple:
        """Decode, count and apply one payload (the decoded batch lives only here); the
        row's (ts, rank, events, stored, removed, cleared, unknown)."""
        b = decode(payload)
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

    def _fill(self, st: Stream, t: float, first: int, last: int) -> None:
        st.gaps += 1
        got = self._replay(st, first, last, t).got if st.replay and self._may_replay(st) else 0
        missing = last - first + 1 - got
        st.lost_batches += missing
        self._gap(st, t, "gap", first, last, missing == 0)

    def _may_replay(self, st: Stream) -> bool:
        return time.monotonic() >= st.replay_after and not self._halt()

    def _join(self, st: Stream) -> None:
        """On first connecting: everything the replay buffer holds, from seq 0, so that a
        subscriber joining a busy (or idle) node starts with its true cache."""
        st.joined = True
        st.join_seqs = {}
        res = self._replay(st, 0, 2**63 - 1, self.clock() - self.t0,
                           min(self.cfg.replay_timeout_s, JOIN_TIMEOUT_S))
        if res.timed_out:  # cut short by its own short wait, not a failure: no backoff, so
            st.replay_after = time.monotonic()  # the first live batch asks for the rest
        if st.join_seqs:
            st.last_seq = max(st.join_seqs)
        else:
            st.join_seqs = None

    def _replay(self, st: Stream, first: int, last: int, t: float,
                timeout_s: float | None = None) -> replay_wire.Fetched:
        """Ask the replay socket for batches from `first`; ingest those up to `last`
        (kvviz.node.kvevents.replay.fetch: bounded in time and bytes); a failure backs off."""
        def take(ans: replay_wire.ReplayFrame) -> None:
            if st.join_seqs is not None and st.last_seq is None:
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

    # ---- reporting ------------------------------------------------------------------------
    def problems(self) -> dict[int, tuple[bool, str]]:
        """Streams with no decodable batch yet: sid -> (definitive, message)
        (kvviz.node.kvevents.stream.problem)."""
        out = {}
        for st in self.streams:
            p = problem(st, self.cfg.topic)
            if p is not None:
                out[st.sid] = p
        return out

    def summary(self) -> list[dict]:
        """One `--json` object per stream (kvviz.node.kvevents.stream.summary)."""
        return [summary(st, self.model) for st in self.streams]

    def close(self, sockets_closed: Callable[[], None] = lambda: None) -> None:
        """Close every socket (then call sockets_closed) and the context (which waits for
        ZeroMQ's threads: 0.1-0.3 s after a message of many frames)."""
        if self._closed:
            return
        self._closed = True
        for st in self.streams:
            st.sock.disable_monitor()
            st.monitor.close()
            st.sock.close()
        sockets_closed()
        self.ctx.destroy(linger=0)  # any socket left open would make term() wait forever

