"""Fixtures: a fake serving node (see fakes.py) and a port where nothing listens."""
from __future__ import annotations

import socket

import pytest

from tests.node.fakes import FakeNode


@pytest.fixture()
def fake_node():
    node = FakeNode()
    node.thread.start()
    yield node
    node.server.shutdown()
    node.server.server_close()


@pytest.fixture()
def closed_port_url() -> str:
    """A URL on 127.0.0.1 where nothing listens."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/metrics"
