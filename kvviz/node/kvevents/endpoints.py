"""Publisher addresses: checking them, DP rank r at port + r, and why one cannot be reached.

Only the addresses a user names are contacted (plus port + r for DP ranks); nothing here
connects anywhere except a DNS lookup of a named host that did not connect.
"""
from __future__ import annotations

import socket
import urllib.parse
from dataclasses import dataclass


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
    return f"tcp://{u.hostname if ':' not in (u.hostname or '') else f'[{u.hostname}]'}:" \
           f"{u.port + rank}"


def check_endpoint(endpoint: str) -> str:
    try:
        u = urllib.parse.urlsplit(endpoint)
    except ValueError as exc:  # e.g. "Invalid IPv6 URL": name the endpoint too
        raise ValueError(f"{endpoint!r}: {exc}; expected tcp://HOST:PORT (or ipc://PATH)") \
            from None
    if u.scheme == "ipc" and (u.netloc or u.path):
        return endpoint
    if u.scheme != "tcp":
        raise ValueError(f"{endpoint!r}: expected tcp://HOST:PORT (or ipc://PATH)")
    try:
        port = u.port
    except ValueError:
        port = None
    if not u.hostname or port is None or u.hostname == "*":
        raise ValueError(f"{endpoint!r}: expected tcp://HOST:PORT with a host and a port")
    return endpoint


@dataclass(frozen=True)
class SubscriberConfig:
    endpoints: tuple[str, ...]
    dp_ranks: int = 1
    replay: tuple[str, ...] = ()  # one per endpoint, or none
    topic: str = ""
    replay_timeout_s: float = 2.0

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
        for e in self.endpoints:
            endpoint_for_rank(e, self.dp_ranks - 1)


def why_not_connected(endpoint: str) -> str:
    u = urllib.parse.urlsplit(endpoint)
    if u.scheme == "tcp" and u.hostname:
        try:
            socket.getaddrinfo(u.hostname, u.port)
        except (OSError, UnicodeError) as exc:
            return f"the host {u.hostname!r} does not resolve: {exc}"
    return "nothing listens there, or it is unreachable"
