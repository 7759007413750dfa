"""The scrape timeout is a deadline for the whole request, whatever the server does."""
from __future__ import annotations

import time
import tracemalloc

import pytest

from kvviz.node.fleet import FleetError, list_nodes, query
from kvviz.node.promtext import NodeStatus
from kvviz.node.scrape import Scraper, scrape_once

from .hostile import BEHAVIOURS, HostileServer

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
