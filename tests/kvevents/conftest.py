from __future__ import annotations

import random
import socket
import time

import pytest

pytest.importorskip("zmq")
pytest.importorskip("msgspec")


def free_base_port(n: int = 1) -> int:
    """A base port with n consecutive free ports on 127.0.0.1 (checked by binding)."""
    for _ in range(200):
        base = random.randint(20_000, 60_000)
        socks = []
        try:
            for k in range(n):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", base + k))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no free ports")


def wait_connected(sub, timeout: float = 5.0) -> None:
    """Poll until every stream's SUB socket is connected, then let subscriptions settle."""
    end = time.monotonic() + timeout
    while not all(s.connected for s in sub.streams):
        assert time.monotonic() < end, "subscriber did not connect"
        sub.poll(20)
    time.sleep(0.2)


def drain(sub, until, timeout: float = 5.0) -> None:
    end = time.monotonic() + timeout
    while not until():
        assert time.monotonic() < end, "timed out waiting for messages"
        sub.poll(20)


@pytest.fixture
def ports():
    return free_base_port
