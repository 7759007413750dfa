"""The scrape timeout is a deadline for the whole request, whatever the server does."""
from __future__ import annotations

import socket
import threading
import time
import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvviz.node.fleet import FleetError, list_nodes, query
from kvviz.node.promtext import NodeStatus
from kvviz.node.scrape import Scraper, scrape_once
from tests.node.hostile import BEHAVIOURS, HostileServer

TIMEOUT_S = 0.5
CAP = 1 << 20


@pytest.fixture(scope="module")
def hostile():
    with HostileServer() as srv:
        yield srv


@pytest.mark.parametrize("path", sorted(BEHAVIOURS))
def test_scrape_of_a_hostile_server_ends_within_timeout_plus_one_second(hostile, path):
    t0 = time.monotonic()
    s = scrape_once(hostile.url(path), timeout_s=TIMEOUT_S, max_bytes=CAP)
    assert time.monotonic() - t0 < TIMEOUT_S + 1.0
    assert s.status in (NodeStatus.TIMEOUT, NodeStatus.GARBLED, NodeStatus.UNREACHABLE)
    assert s.message


def test_https_to_a_server_that_never_completes_the_handshake_ends_in_time(hostile):
    t0 = time.monotonic()
    s = scrape_once(hostile.url("/never").replace("http://", "https://"), timeout_s=TIMEOUT_S)
    assert s.status == NodeStatus.TIMEOUT and time.monotonic() - t0 < TIMEOUT_S + 1.0


@pytest.mark.parametrize("path", ["/endless-body", "/huge-body", "/long-header",
                                  "/endless-headers"])
def test_memory_of_a_flooding_server_stays_under_the_body_cap(hostile, path):
    tracemalloc.start()
    try:
        s = scrape_once(hostile.url(path), timeout_s=5.0, max_bytes=CAP)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert s.status != NodeStatus.OK
    assert peak < 2 * CAP + (1 << 20)


@pytest.mark.parametrize("path", ["/drip-status", "/continue-flood", "/drip-chunked"])
def test_fleet_query_of_a_hostile_server_ends_within_timeout_plus_one_second(hostile, path):
    t0 = time.monotonic()
    with pytest.raises(FleetError, match="within"):
        query(hostile.url(path), "up", timeout_s=TIMEOUT_S)
    assert time.monotonic() - t0 < TIMEOUT_S + 1.0


def test_fleet_listing_as_a_whole_keeps_the_deadline(hostile):
    t0 = time.monotonic()
    with pytest.raises(FleetError):
        list_nodes(hostile.url("/drip-body"), timeout_s=TIMEOUT_S)
    assert time.monotonic() - t0 < TIMEOUT_S + 1.0


def test_scrape_loop_goes_on_after_a_hostile_answer(hostile):
    got = []
    n = Scraper(hostile.url("/continue-flood"), got.append, interval_s=0.05,
                timeout_s=0.2, max_samples=3).run()
    assert n == 3 and [s.status for s in got] == [NodeStatus.TIMEOUT] * 3


def _serve_once(payload: bytes) -> tuple[str, threading.Thread]:
    """A listener on 127.0.0.1 that answers one request with `payload`, then closes."""
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(1)
    lsock.settimeout(5.0)

    def serve() -> None:
        with lsock:
            try:
                conn, _ = lsock.accept()
            except OSError:
                return
            with conn:
                try:
                    conn.recv(65536)
                    conn.sendall(payload)
                except OSError:
                    pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return f"http://127.0.0.1:{lsock.getsockname()[1]}/metrics", thread


_HEADS = st.sampled_from([b"", b"HTTP/1.1 200 OK\r\n", b"HTTP/1.0 100 Continue\r\n\r\n",
                          b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
                          b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n",
                          b"HTTP/1.1 302 Found\r\nLocation: gopher://x\r\n\r\n",
                          b"HTTP/1.1 \x1b[31m200\r\n\r\n"])


@settings(max_examples=40, deadline=None)
@given(_HEADS, st.binary(max_size=300))
def test_any_answer_gives_a_sample_within_the_deadline(head, tail):
    url, thread = _serve_once(head + tail)
    t0 = time.monotonic()
    s = scrape_once(url, timeout_s=TIMEOUT_S, max_bytes=CAP)
    assert time.monotonic() - t0 < TIMEOUT_S + 1.0
    assert s.message.isprintable()
    thread.join(2.0)


def test_dashboard_stop_ends_a_scrape_of_a_hostile_node_as_stopped(hostile, tmp_path):
    from kvviz.runs.jobs import ScrapeJob
    from kvviz.store.reader import RunReader

    proc = ScrapeJob(tmp_path)
    out = proc.start(hostile.url("/drip-status"), interval_s=0.2, timeout_s=1.0)
    end = time.monotonic() + 30
    while proc.status().last_message.count("timeout") < 1 and time.monotonic() < end:
        time.sleep(0.2)  # at least one scrape gave up, the next one is under way
    t0 = time.monotonic()
    proc.stop()  # SIGTERM; SIGKILL only after 5 s
    assert time.monotonic() - t0 < 1.0 + 1.0
    r = RunReader(out)
    try:
        assert r.status == "stopped"
    finally:
        r.close()
