"""Scrape a serving node's /metrics: one shot (`scrape_once`) or a loop (`Scraper`).

Neither ever raises because of the node: an unreachable, slow or garbled endpoint becomes a
NodeSample whose status says so, and the loop keeps going. Only a bad URL (user input) raises,
or one outside KVVIZ_SCRAPE_ALLOW (ScrapeNotAllowedError). The timeout is a deadline for the
whole request (kvviz.node.http).
"""
from __future__ import annotations

import http.client as httplib
import json
import math
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Self

from kvviz.core.errors import KvvizError
from kvviz.node import http
from kvviz.node.http import is_loopback_host  # noqa: F401 (re-export)
from kvviz.node.promtext import GarbledMetricsError, NodeSample, NodeStatus, sample_from_text
from kvviz.node.trust import ScrapeNotAllowedError, check_scrape_url

DEFAULT_TIMEOUT_S = 3.0
DEFAULT_MAX_BYTES = 32 * 1024 * 1024  # a vLLM /metrics body is typically 50-500 KB

Sink = Callable[[NodeSample], None]


class NodeUrlError(KvvizError, ValueError):
    """A URL kvviz will not scrape (wrong scheme, no host)."""


def normalize_url(url: str) -> str:
    """`host:8000` -> `http://host:8000/metrics`; a URL with a path is kept as given."""
    url = url.strip()
    if "://" not in url:
        url = "http://" + url
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 (raises ValueError for a port that is not 0..65535)
    except ValueError as exc:
        raise NodeUrlError(f"{url!r}: not a URL ({exc})") from None
    if parts.scheme not in ("http", "https"):
        raise NodeUrlError(f"{url!r}: only http:// and https:// metrics endpoints are scraped")
    if not parts.hostname:
        raise NodeUrlError(f"{url!r}: no host")
    if any(not c.isprintable() or c.isspace() for c in parts.netloc):
        raise NodeUrlError(f"{url!r}: spaces or control characters in the host")
    path = parts.path if parts.path not in ("", "/") else "/metrics"
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


MAX_SECONDS = 7 * 86400.0  # a week: anything longer is a typo (and overflows socket timeouts)


def check_seconds(what: str, value: float, *, zero: bool = False,
                  most: float = MAX_SECONDS) -> None:
    """Raise KvvizError unless `value` is a finite number of seconds in (0, most]
    ([0, most] with `zero`)."""
    ok = isinstance(value, (int, float)) and math.isfinite(value) and (
        value >= 0 if zero else value > 0) and value <= most
    if not ok:
        low = ">= 0" if zero else "> 0"
        raise KvvizError(f"{what} must be {low} and at most {most:g} s, got {value!r}")


def printable(text: str, max_chars: int = 500) -> str:
    """One line of text safe for a terminal: control characters (escape sequences, newlines)
    as \\xNN, cut at `max_chars`. Messages carry text the node chose (an HTTP reason)."""
    out = "".join(c if c.isprintable() else f"\\x{ord(c):02x}" if ord(c) < 256
                  else f"\\u{ord(c):04x}" for c in text[:max_chars])
    return out + ("..." if len(text) > max_chars else "")


def _fetch(url: str, timeout_s: float, max_bytes: int) -> str:
    """The body as text. Raises TimeoutError, GarbledMetricsError, _HttpStatusError,
    ScrapeNotAllowedError or OSError/HTTPException/ValueError."""
    answer = http.get(url, timeout_s=timeout_s, max_bytes=max_bytes,
                      accept="text/plain;version=0.0.4")
    if not 200 <= answer.status < 300:
        raise _HttpStatusError(f"HTTP {answer.status} {answer.reason}")
    try:
        return answer.body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise GarbledMetricsError(f"body is not UTF-8 text ({exc})") from exc


class _HttpStatusError(Exception):
    pass


def scrape_once(
    url: str,
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    max_bytes: int = DEFAULT_MAX_BYTES,
    clock: Callable[[], float] = time.time,
) -> NodeSample:
    """Fetch and parse one sample. Never raises for the node's faults, only for a bad URL."""
    url = normalize_url(url)
    t0, m0 = clock(), time.monotonic()

    def failed(status: NodeStatus, message: str) -> NodeSample:
        return NodeSample(time=t0, url=url, status=status, message=printable(message),
                          latency_s=time.monotonic() - m0)

    check_scrape_url(url)
    check_seconds("scrape timeout", timeout_s)
    try:
        text = _fetch(url, timeout_s, max_bytes)
    except (GarbledMetricsError, http.BodyTooLargeError) as exc:
        return failed(NodeStatus.GARBLED, str(exc))
    except (_HttpStatusError, ScrapeNotAllowedError) as exc:  # the latter: a redirect
        return failed(NodeStatus.UNREACHABLE, str(exc))
    except TimeoutError:
        return failed(NodeStatus.TIMEOUT, f"no complete answer within {timeout_s:g}s")
    except (OSError, httplib.HTTPException, ValueError) as exc:
        reason = getattr(exc, "reason", None) or exc
        return failed(NodeStatus.UNREACHABLE, f"{type(reason).__name__}: {reason}")
    try:
        sample = sample_from_text(text, url=url, time=t0)
    except GarbledMetricsError as exc:
        return failed(NodeStatus.GARBLED, str(exc))
    except Exception as exc:  # a parser bug must not end the scrape loop: report, go on
        return failed(NodeStatus.GARBLED, f"cannot read the body ({type(exc).__name__}: {exc})")
    return replace(sample, latency_s=time.monotonic() - m0)


def _delta(prev: float | None, cur: float | None) -> float | None:
    if prev is None or cur is None or cur < prev:  # missing, or a counter reset (restart)
        return None
    return cur - prev


def with_rates(prev: NodeSample | None, cur: NodeSample) -> NodeSample:
    """`cur` with preemptions/s and the interval prefix hit rate since `prev` (both ok)."""
    if prev is None or not prev.ok or not cur.ok or cur.time <= prev.time:
        return cur
    dt = cur.time - prev.time
    d_pre = _delta(prev.preemptions_total, cur.preemptions_total)
    d_q = _delta(prev.prefix_queries_total, cur.prefix_queries_total)
    d_h = _delta(prev.prefix_hits_total, cur.prefix_hits_total)
    return replace(
        cur,
        interval_s=dt,
        preemptions_per_s=None if d_pre is None else d_pre / dt,
        prefix_hit_rate_interval=d_h / d_q if d_q and d_h is not None else None,
    )


class Scraper:
    """Scrape `url` every `interval_s` for `duration_s` (None: until stopped), feeding `sink`.

    Ticks are on a fixed grid from the start (a slow scrape does not shift later ones; missed
    ticks are skipped). `stop` (a threading.Event) ends the loop at the next wait. An exception
    raised by `sink` is ours, not the node's: it propagates and ends the loop.
    """

    def __init__(
        self,
        url: str,
        sink: Sink,
        *,
        interval_s: float = 5.0,
        duration_s: float | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_samples: int | None = None,
        stop: threading.Event | None = None,
    ) -> None:
        check_seconds("scrape interval", interval_s)
        if duration_s is not None:
            check_seconds("scrape duration", duration_s, zero=True, most=1e9)
        check_seconds("scrape timeout", timeout_s)
        self.url = normalize_url(url)
        check_scrape_url(self.url)
        self.sink = sink
        self.interval_s = interval_s
        self.duration_s = duration_s
        self.timeout_s = timeout_s
        self.max_samples = max_samples
        self.stop = stop if stop is not None else threading.Event()
        self.samples = 0
        self.last: NodeSample | None = None
        self._prev_ok: NodeSample | None = None

    def step(self) -> NodeSample:
        """One scrape, rates computed against the previous ok sample, handed to the sink."""
        sample = with_rates(self._prev_ok, scrape_once(self.url, timeout_s=self.timeout_s))
        if sample.ok:
            self._prev_ok = sample
        self.last = sample
        self.samples += 1
        self.sink(sample)
        return sample

    def run(self) -> int:
        """Block until duration, max_samples or stop; returns the number of samples taken."""
        start = time.monotonic()
        end = math.inf if self.duration_s is None else start + self.duration_s
        tick = 0
        while not self.stop.is_set():
            self.step()
            if self.max_samples is not None and self.samples >= self.max_samples:
                break
            now = time.monotonic()
            tick = max(tick + 1, math.ceil((now - start) / self.interval_s))
            next_at = start + tick * self.interval_s
            if next_at > end:
                break
            if self.stop.wait(max(0.0, next_at - now)):
                break
        return self.samples

    def start(self) -> threading.Thread:
        """Run in a daemon thread; `scraper.stop.set()` ends it."""
        thread = threading.Thread(target=self.run, name=f"kvviz-scrape {self.url}", daemon=True)
        thread.start()
        return thread


class JsonlSink:
    """Append each sample as one JSON line; flushed per line so a reader sees it at once."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._fh = self.path.open("a", encoding="utf-8")

    def __call__(self, sample: NodeSample) -> None:
        self._fh.write(json.dumps(sample.to_dict(), separators=(",", ":")) + "\n")
        self._fh.flush()

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_jsonl(path: str | Path) -> list[NodeSample]:
    """Samples written by JsonlSink; a torn last line (killed writer) is ignored."""
    out: list[NodeSample] = []
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            out.append(NodeSample.from_dict(json.loads(line)))
        except (KvvizError, KeyError, TypeError, ValueError) as exc:
            if i == len(lines):
                break
            raise KvvizError(f"{path}:{i}: not a kvviz node sample ({exc})") from exc
    return out
