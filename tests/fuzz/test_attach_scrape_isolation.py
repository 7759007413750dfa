"""Round 3, item 2: attach keeps its streams apart (kvviz/node/scrape_child.py).

Before: a /metrics body of 1.63M tiny series (just under the 32 MiB cap) beside a publisher
of ~50 batches/s: the parse blocked the loop and its memory tripped the KV-event guard, which
blamed the event stream ("messages of many frames?"); 2 of ~1,000 batches recorded, status
left `running`; without --kv-events SIGTERM took 15-23 s and `--duration 40` ended at 44.3 s.
The bounds below are generous (this machine is shared): they catch those failures, they do
not time kvviz (benchmarks/bench_inputs.py attach does).
"""
from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kvviz.commands.cli import main
from kvviz.node.promtext import MAX_SERIES
from kvviz.node.scrape_child import ChildScraper
from tests.fuzz.hostile_http import Hostile
from tests.kvevents.conftest import free_base_port
from tests.kvevents.schema_pub import SchemaPublisher, payload, publish_for
from tests.kvevents.schema_pub import store as stored

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def node():
    h = Hostile()
    yield h
    h.server.shutdown()
    h.server.server_close()


def test_a_body_of_too_many_series_is_one_garbled_sample_from_the_worker(node):
    got = []
    s = ChildScraper(node.url + "/metrics", got.append, interval_s=1, timeout_s=10)
    try:
        sample = s.step()
    finally:
        s.close()
    assert sample.status == "garbled" and f"{MAX_SERIES:,}" in sample.message
    assert got == [sample]


def test_a_scrape_past_its_deadline_is_stopped_and_said(node):
    s = ChildScraper(node.url + "/drip", lambda _s: None, interval_s=1, timeout_s=30)
    s.deadline_s = 1.0
    try:
        sample = s.step()
        assert sample.status == "timeout" and "scrape process was stopped" in sample.message
        assert s._proc is None  # killed; the next begin starts a fresh worker
    finally:
        s.close()


def _attach(argv: list[str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "kvviz", "attach", *argv], cwd=ROOT,
                            stderr=subprocess.PIPE, text=True,
                            env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})


@pytest.mark.parametrize("path", ["/heavy", "/drip"])
def test_sigterm_ends_attach_whatever_a_scrape_is_doing(node, tmp_path, path):
    out = tmp_path / "n.db"
    p = _attach([node.url + path, "--timeout", "30", "--out", str(out), "--quiet"])
    try:
        time.sleep(4.0)  # the scrape is in flight (its worker parsing, or the node dripping)
        t0 = time.monotonic()
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=60)
        took = time.monotonic() - t0
    finally:
        p.kill()
    assert took < 5.0, f"SIGTERM took {took:.1f} s"  # before: 15-23 s
    with sqlite3.connect(out) as db:
        assert db.execute("SELECT status FROM run").fetchone()[0] == "stopped"


def test_the_event_stream_is_not_starved_or_blamed_by_a_hostile_scrape(node, tmp_path):
    port = free_base_port(1)
    ep = f"tcp://127.0.0.1:{port}"
    pub = SchemaPublisher(ep)
    out = tmp_path / "n.db"
    try:
        th = publish_for(pub, 7.0, lambda i: payload([stored([1000 + i], None)]))
        rc = main(["attach", node.url + "/heavy", "--kv-events", ep, "--interval", "0.5",
                   "--timeout", "10", "--duration", "5", "--out", str(out), "--quiet"])
        th.join()
    finally:
        pub.close()
    assert rc == 1  # no scrape succeeded: said, not blamed on the events
    with sqlite3.connect(out) as db:
        status, message = db.execute("SELECT status, status_message FROM run").fetchone()
        batches = db.execute("SELECT COUNT(*) FROM kv_batches").fetchone()[0]
    assert status == "finished" and "frames" not in message
    assert batches >= 40  # ~20 a second for 5 s, less the subscriber's start (before: 2)
