"""Subscribe to KV-event publishers: one SUB socket per (endpoint, DP rank).

What a message does to its stream (seq tracking, gaps, replays, decode, the model, the
recording) is kvviz.node.kvevents.ingest's `Ingest`, which Subscriber extends with the
sockets. ZeroMQ connects lazily, so a socket monitor tells an unreachable address from a
quiet one; connecting to a stream with a replay socket asks for its whole cache (`_join`).

Bounds (docs/RELIABILITY.md, "KV-event streams"), which keep the process under about 1 GB
whatever the publishers send in messages of a few frames (ZeroMQ caps each frame, not how
many a message has: a command's MemoryGuard, kvviz.node.kvevents.guard, wakes `poll`, which
closes the sockets and raises MemoryLimit; a message's frames past KEPT_FRAMES are dropped as
read): frames and HWMs from endpoints.queue_bounds (the config's max_message_bytes, lowered
when many streams share the budget), so the receive queues, the message in hand and a replay
fetch's frames hold at most endpoints.RECEIVE_BUDGET bytes (a larger frame makes ZeroMQ drop
the connection before it is buffered, counted as a disconnect; a full queue pushes back on
TCP and the publisher drops, which the seqs show as gaps and lost batches); what one message
may decode into and replays are bounded in ingest.py. `poll` returns within about
POLL_BUDGET_S plus one message's handling; `should_stop` (set by the caller) ends a replay
wait and a huge batch's model update.
"""
from __future__ import annotations

import time
from collections.abc import Callable

import zmq
from zmq.utils.monitor import recv_monitor_message

from kvviz.node.kvevents import replay as replay_wire
from kvviz.node.kvevents.endpoints import (  # SubscriberConfig is imported from here too
    SubscriberConfig,
    check_fd_limit,
    endpoint_for_rank,
    queue_bounds,
)
from kvviz.node.kvevents.guard import MemoryGuard, MemoryLimit
from kvviz.node.kvevents.ingest import JOIN_IDLE_SLICES, Ingest
from kvviz.node.kvevents.model import CacheModel
from kvviz.node.kvevents.stream import Stream, problem, summary
from kvviz.store.kv_writer import KvEventWriter

KEPT_FRAMES = 4  # frames of a message read into Python; the rest are counted and dropped
POLL_BUDGET_S = 0.1
SLICE_MS = replay_wire.SLICE_MS


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


class Subscriber(Ingest):
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
        more = next((st for st in self.streams if st.join_more
                     and st.join_idle < JOIN_IDLE_SLICES), None)
        if more is not None and self._may_replay(more):  # a join cut short: its next slice
            n += self.join_rest(more)  # (one stream's a poll: a poll stays short)
        ready = self.poller.poll(0 if n else min(timeout_ms, SLICE_MS))
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

