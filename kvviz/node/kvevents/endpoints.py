"""Publisher addresses: checking them, DP rank r at port + r, why one cannot be reached, and
what a set of streams may cost the process (file descriptors, receive queues).

Only the addresses a user names are contacted (plus port + r for DP ranks); nothing here
connects anywhere except a DNS lookup of a named host that did not connect.
"""
from __future__ import annotations

import os
import resource
import socket
import urllib.parse
from dataclasses import dataclass
from typing import NamedTuple

IPC_PATH_MAX = 107  # bytes of a Unix socket path (sun_path holds 108 with the NUL)
FDS_PER_STREAM = 5  # a SUB socket, its monitor pair, its connection (measured: about 4.1)
FDS_SPARE = 64  # the recording, the context's threads, a replay request, Python's own
# The largest frame a subscriber takes: one such batch decodes into up to 16x its size in
# Python objects, which with the receive queues (192 MB) and the model keeps the process
# under 1 GB, 940 MB on paper (docs/RELIABILITY.md, "KV-event streams"; the memory guard,
# kvviz.node.kvevents.guard, trips above that).
MAX_MESSAGE_MB = 16
RECEIVE_BUDGET = 192 << 20  # bytes of raw frames, all queues and messages in hand together


def endpoint_for_rank(endpoint: str, rank: int) -> str:
    """DP rank r publishes on the endpoint's port + r (tcp only)."""
    if rank == 0:
        return endpoint
    try:
        u = urllib.parse.urlsplit(endpoint)
    except ValueError as exc:
        raise ValueError(f"{endpoint!r}: {exc}") from None
    if u.scheme != "tcp" or u.port is None:
        raise ValueError(f"{endpoint}: --dp-ranks needs tcp://HOST:PORT endpoints")
    if u.port + rank > 65535:
        raise ValueError(f"{endpoint}: DP rank {rank} would publish on port {u.port + rank}, "
                         "past 65535")
    return f"tcp://{u.hostname if ':' not in (u.hostname or '') else f'[{u.hostname}]'}:" \
           f"{u.port + rank}"


def check_endpoint(endpoint: str) -> str:
    """`endpoint` when ZeroMQ will accept it as written: tcp://HOST:PORT (port 1-65535,
    nothing after the port, no user name) or ipc://PATH (a path that fits a Unix socket);
    ValueError naming what is wrong otherwise. No character below 0x21 or DEL anywhere
    (urlsplit drops a trailing newline silently; ZeroMQ does not)."""
    if not isinstance(endpoint, str) or not endpoint:
        raise ValueError(f"{endpoint!r}: expected tcp://HOST:PORT (or ipc://PATH)")
    bad = next((c for c in endpoint if ord(c) < 0x21 or ord(c) == 0x7F), None)
    if bad is not None:
        raise ValueError(f"{endpoint!r}: contains {bad!r} (no spaces or control characters "
                         "in an endpoint)")
    if endpoint.startswith("ipc://"):
        path = endpoint[len("ipc://"):]
        if not path:
            raise ValueError(f"{endpoint!r}: expected ipc://PATH with a path")
        if len(os.fsencode(path)) > IPC_PATH_MAX:
            raise ValueError(f"{endpoint[:60]!r}...: the ipc path is {len(os.fsencode(path))} "
                             f"bytes; a Unix socket path holds at most {IPC_PATH_MAX}")
        return endpoint
    try:
        u = urllib.parse.urlsplit(endpoint)
    except ValueError as exc:  # e.g. "Invalid IPv6 URL": name the endpoint too
        raise ValueError(f"{endpoint!r}: {exc}; expected tcp://HOST:PORT (or ipc://PATH)") \
            from None
    if u.scheme != "tcp":
        raise ValueError(f"{endpoint!r}: expected tcp://HOST:PORT (or ipc://PATH)")
    try:
        port = u.port
    except ValueError:
        port = None
    if not u.hostname or port is None or u.hostname == "*":
        raise ValueError(f"{endpoint!r}: expected tcp://HOST:PORT with a host and a port")
    if "@" in u.netloc:
        raise ValueError(f"{endpoint!r}: no user name or password in a ZeroMQ endpoint")
    if u.path or u.query or u.fragment or endpoint.endswith(("?", "#")):
        raise ValueError(f"{endpoint!r}: nothing may follow the port (tcp://HOST:PORT)")
    if not 1 <= port <= 65535:
        raise ValueError(f"{endpoint!r}: port must be in [1, 65535], got {port}")
    return endpoint


def check_fd_limit(streams: int) -> int:
    """The open files `streams` SUB sockets need, raising the soft RLIMIT_NOFILE to that
    when the hard limit allows; ValueError (ulimit -n named) when it does not, or when more
    streams than MAX_STREAMS would take the receive queues past the budget."""
    if streams > MAX_STREAMS:
        raise ValueError(f"{streams} streams (endpoints x --dp-ranks): at most {MAX_STREAMS:,} "
                         f"share the {RECEIVE_BUDGET >> 20} MB receive budget (1 KiB frames)")
    need = streams * FDS_PER_STREAM + FDS_SPARE
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and need > soft:
        if hard == resource.RLIM_INFINITY or need <= hard:
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
                return need
            except (ValueError, OSError):
                pass
        raise ValueError(f"{streams} streams (endpoints x --dp-ranks) need about {need} open "
                         f"files; this process may open {soft} (ulimit -n; hard limit "
                         f"{'unlimited' if hard == resource.RLIM_INFINITY else hard})")
    return need



class QueueBounds(NamedTuple):
    hwm: int  # messages each SUB socket queues (ZMQ_RCVHWM)
    frame_bytes: int  # the largest frame each socket takes (ZMQ_MAXMSGSIZE)


IN_HAND_FRAMES = 2  # the message being handled: its topic and its payload
REPLAY_FRAMES = 6  # a replay fetch (one at a time): RCVHWM 1 + one being received + the
# answer in hand, 2 large frames each (kvviz.node.kvevents.replay.fetch)


MIN_FRAME = 1024  # the frame cap is never lowered below this
# more streams than this would hold more than RECEIVE_BUDGET at MIN_FRAME frames, HWM 1
MAX_STREAMS = (RECEIVE_BUDGET // MIN_FRAME - IN_HAND_FRAMES - REPLAY_FRAMES) // 4


def reserved_frames(replay: bool) -> int:
    """Frames of the receive budget held beside the SUB queues: the message in hand, and a
    replay fetch's when the streams have a replay socket."""
    return IN_HAND_FRAMES + (REPLAY_FRAMES if replay else 0)


def queue_bounds(streams: int, max_message_bytes: int, replay: bool = False) -> QueueBounds:
    """What keeps every raw frame the process holds within RECEIVE_BUDGET: each SUB socket
    holds its HWM of messages plus the one ZeroMQ is receiving, two frames each, beside
    reserved_frames(replay). Frames are capped at max_message_bytes, lowered when many
    streams share the budget (at least an HWM of 1); the HWM is what the budget leaves,
    within [1, 1000]."""
    n, extra = max(1, streams), reserved_frames(replay)
    frame = max(MIN_FRAME, min(max_message_bytes, RECEIVE_BUDGET // (4 * n + extra)))
    hwm = (RECEIVE_BUDGET // frame - extra) // (2 * n) - 1
    return QueueBounds(max(1, min(1000, hwm)), frame)


@dataclass(frozen=True)
class SubscriberConfig:
    endpoints: tuple[str, ...]
    dp_ranks: int = 1
    replay: tuple[str, ...] = ()  # one per endpoint, or none
    topic: str = ""
    replay_timeout_s: float = 2.0
    max_message_bytes: int = 16 << 20  # a larger frame drops the connection (ZMQ_MAXMSGSIZE)

    def __post_init__(self) -> None:
        if not self.endpoints:
            raise ValueError("give at least one endpoint")
        if self.dp_ranks < 1:
            raise ValueError(f"--dp-ranks: must be >= 1, got {self.dp_ranks}")
        if self.replay and len(self.replay) != len(self.endpoints):
            raise ValueError(f"--replay: give one per endpoint ({len(self.endpoints)}), got "
                             f"{len(self.replay)}")
        for e in (*self.endpoints, *self.replay):
            check_endpoint(e)
        if self.dp_ranks > 65535:
            raise ValueError(f"--dp-ranks: must be <= 65535, got {self.dp_ranks}")
        for e in self.endpoints:
            endpoint_for_rank(e, self.dp_ranks - 1)
        for e in self.replay:
            endpoint_for_rank(e, self.dp_ranks - 1)
        if not 1024 <= self.max_message_bytes <= MAX_MESSAGE_MB << 20:
            raise ValueError(f"--max-message-mb: must be in [0.001, {MAX_MESSAGE_MB}]")
        if not (isinstance(self.topic, str) and len(self.topic) <= 4096):
            raise ValueError("--topic: expected text of at most 4096 characters")


def why_not_connected(endpoint: str) -> str:
    u = urllib.parse.urlsplit(endpoint)
    if u.scheme == "tcp" and u.hostname:
        try:
            socket.getaddrinfo(u.hostname, u.port)
        except (OSError, UnicodeError) as exc:
            return f"the host {u.hostname!r} does not resolve: {exc}"
    return "nothing listens there, or it is unreachable"
