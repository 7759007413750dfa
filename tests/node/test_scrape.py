from __future__ import annotations

import threading
import time

import pytest

from kvviz.core.errors import KvvizError
from kvviz.node.promtext import NodeSample, NodeStatus
from kvviz.node.scrape import (
    JsonlSink,
    NodeUrlError,
    Scraper,
    normalize_url,
    read_jsonl,
    scrape_once,
    with_rates,
)
from tests.node import fakes


@pytest.mark.parametrize("given, expected", [
    ("localhost:8000", "http://localhost:8000/metrics"),
    ("http://h:30000", "http://h:30000/metrics"),
    ("http://h:30000/", "http://h:30000/metrics"),
    ("https://h/custom/path?x=1", "https://h/custom/path?x=1"),
])
def test_normalize_url(given, expected):
    assert normalize_url(given) == expected


@pytest.mark.parametrize("bad", ["file:///etc/passwd", "ftp://h/metrics", "http://"])
def test_non_http_urls_are_refused(bad):
    with pytest.raises(NodeUrlError):
        normalize_url(bad)


def test_scrape_vllm_and_sglang_endpoints(fake_node):
    v = scrape_once(fake_node.url("/metrics"))
    g = scrape_once(fake_node.url("/sglang/metrics"))
    assert (v.status, v.engine, v.num_running) == (NodeStatus.OK, "vllm", 8)
    assert (g.status, g.engine, g.num_running) == (NodeStatus.OK, "sglang", 12)
    assert v.latency_s is not None and v.latency_s >= 0


def test_unreachable_endpoint(closed_port_url):
    s = scrape_once(closed_port_url, timeout_s=1.0)
    assert s.status == NodeStatus.UNREACHABLE and "Refused" in s.message
    assert s.kv_usage is None


def test_http_error_status_is_unreachable(fake_node):
    s = scrape_once(fake_node.url("/error"))
    assert s.status == NodeStatus.UNREACHABLE and s.message.startswith("HTTP 500")


def test_redirects_followed_only_to_http(fake_node):
    assert scrape_once(fake_node.url("/moved")).engine == "vllm"
    s = scrape_once(fake_node.url("/moved-to-file"))
    assert s.status == NodeStatus.UNREACHABLE and "file:///etc/passwd" in s.message


@pytest.mark.parametrize("path", ["/slow", "/trickle"])
def test_slow_endpoint_times_out_near_the_timeout(fake_node, path):
    t0 = time.monotonic()
    s = scrape_once(fake_node.url(path), timeout_s=0.3)
    assert s.status == NodeStatus.TIMEOUT
    assert time.monotonic() - t0 < 1.2


@pytest.mark.parametrize("path, why", [("/garbled", "not Prometheus"), ("/binary", "UTF-8")])
def test_garbled_endpoint(fake_node, path, why):
    s = scrape_once(fake_node.url(path))
    assert s.status == NodeStatus.GARBLED and why in s.message


def test_oversized_body_is_garbled(fake_node):
    s = scrape_once(fake_node.url("/metrics"), max_bytes=100)
    assert s.status == NodeStatus.GARBLED and "larger than" in s.message


def _ok(t: float, pre: float | None, q: float | None, h: float | None) -> NodeSample:
    return NodeSample(time=t, url="u", status=NodeStatus.OK, preemptions_total=pre,
                      prefix_queries_total=q, prefix_hits_total=h)


def test_rates_from_successive_counters():
    s = with_rates(_ok(10, 4, 100, 50), _ok(12, 10, 300, 130))
    assert s.interval_s == 2 and s.preemptions_per_s == 3
    assert s.prefix_hit_rate_interval == pytest.approx(0.4)


def test_counter_reset_gives_no_rate():
    s = with_rates(_ok(10, 40, 1000, 500), _ok(12, 1, 10, 5))
    assert s.preemptions_per_s is None and s.prefix_hit_rate_interval is None


def test_no_rate_without_previous_or_without_queries():
    assert with_rates(None, _ok(1, 1, 1, 1)).preemptions_per_s is None
    assert with_rates(_ok(1, 1, 5, 1), _ok(2, 1, 5, 1)).prefix_hit_rate_interval is None


def test_scraper_computes_rates_between_samples(fake_node):
    got: list[NodeSample] = []
    n = Scraper(fake_node.url("/counter"), got.append, interval_s=0.05, max_samples=3).run()
    assert n == 3 and all(s.ok for s in got)
    assert got[0].preemptions_per_s is None
    for s in got[1:]:
        assert s.preemptions_per_s == pytest.approx(3 / s.interval_s)
        assert s.prefix_hit_rate_interval == pytest.approx(0.4)


def test_scraper_keeps_going_through_failures_and_rates_span_them(fake_node):
    got: list[NodeSample] = []
    Scraper(fake_node.url("/flaky"), got.append, interval_s=0.05, max_samples=3).run()
    assert [s.status for s in got] == [NodeStatus.OK, NodeStatus.UNREACHABLE, NodeStatus.OK]
    assert got[2].interval_s == pytest.approx(got[2].time - got[0].time)
    assert got[2].preemptions_per_s == pytest.approx(3 / got[2].interval_s)


def test_scraper_survives_dead_slow_and_garbled_nodes(fake_node, closed_port_url):
    for url, status in [(closed_port_url, NodeStatus.UNREACHABLE),
                        (fake_node.url("/slow"), NodeStatus.TIMEOUT),
                        (fake_node.url("/garbled"), NodeStatus.GARBLED)]:
        got: list[NodeSample] = []
        Scraper(url, got.append, interval_s=0.05, timeout_s=0.2, max_samples=2).run()
        assert [s.status for s in got] == [status, status]


def test_scraper_stops_on_event(fake_node):
    stop = threading.Event()
    got: list[NodeSample] = []
    scraper = Scraper(fake_node.url("/metrics"), got.append, interval_s=0.05, stop=stop)
    thread = scraper.start()
    time.sleep(0.3)
    stop.set()
    thread.join(timeout=2)
    assert not thread.is_alive() and len(got) >= 2


def test_scraper_duration_bounds_the_run(fake_node):
    t0 = time.monotonic()
    n = Scraper(fake_node.url("/metrics"), lambda s: None, interval_s=0.1, duration_s=0.35).run()
    assert 3 <= n <= 5 and time.monotonic() - t0 < 1.5


def test_sink_errors_propagate(fake_node):
    def sink(s: NodeSample) -> None:
        raise RuntimeError("store full")

    with pytest.raises(RuntimeError, match="store full"):
        Scraper(fake_node.url("/metrics"), sink, interval_s=0.05, max_samples=2).run()


def test_jsonl_round_trip_ignores_torn_last_line(fake_node, tmp_path):
    path = tmp_path / "node.jsonl"
    with JsonlSink(path) as sink:
        Scraper(fake_node.url("/counter"), sink, interval_s=0.05, max_samples=2).run()
    with path.open("a") as fh:
        fh.write('{"time": 1, "url"')  # a writer killed mid-line
    back = read_jsonl(path)
    assert len(back) == 2 and back[1].preemptions_per_s is not None


@pytest.mark.parametrize("kw", [dict(timeout_s=float("inf")), dict(timeout_s=float("nan")),
                                dict(interval_s=float("inf")), dict(duration_s=float("nan")),
                                dict(timeout_s=1e9), dict(duration_s=-1.0)])
def test_scraper_refuses_seconds_that_are_not_finite_or_out_of_range(kw):
    with pytest.raises(KvvizError, match="must be"):
        Scraper("localhost:9", lambda s: None, **kw)


def test_scrape_once_refuses_an_infinite_timeout():
    with pytest.raises(KvvizError, match="scrape timeout"):
        scrape_once("localhost:9", timeout_s=float("inf"))


def test_an_infinite_count_does_not_end_the_scrape_loop(fake_node, monkeypatch):
    monkeypatch.setattr(fakes, "VLLM_TEXT", "vllm:num_requests_running{engine=\"0\"} +Inf\n")
    got = []
    Scraper(fake_node.url("/metrics"), got.append, interval_s=0.01, max_samples=3).run()
    assert [s.status for s in got] == [NodeStatus.OK] * 3 and got[0].num_running is None
