"""A scrape in a process of its own, so a hostile /metrics cannot starve, kill or be blamed on
what runs beside it (`kvviz attach`'s KV-event stream and its memory guard).

`ChildScraper` keeps one worker process (`python -m kvviz.node.scrape_child`) that fetches
and parses one /metrics body per request, under its own bounds: RLIMIT_DATA of CHILD_MB (a
parse past it is one `garbled` sample, "needed more than N MB"), promtext's series cap, and a
deadline per scrape (the fetch timeout + PARSE_S) after which the parent kills it and records
a `timeout` sample. The parent never blocks on it: `begin` sends a request, `collect` takes a
finished answer (select with no wait) and hands the sample to the sink, so the event loop keeps
polling its sockets, and SIGTERM or --duration end the run at once (`close` kills the worker).
Requests and answers are one JSON line each (NodeSample.to_dict): nothing is unpickled.
"""
from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time

from kvviz.node.promtext import NodeSample, NodeStatus
from kvviz.node.scrape import Scraper, printable, with_rates

CHILD_MB = 1024  # the worker's data segment: a parse larger than this is the node's fault
PARSE_S = 5.0  # beyond the fetch timeout, what one parse may take before the worker is killed
START_S = 2.0  # a worker's interpreter start, allowed for in each deadline
ANSWER_MAX = 64 << 20  # bytes of one answer line (the series cap keeps real ones far below)


class ChildScraper(Scraper):
    """Scraper's interface (url, sink, last, samples, step) with the work in a worker process;
    `begin` / `collect` / `close` for a loop that must not block."""

    def __init__(self, url: str, sink, **kw) -> None:
        super().__init__(url, sink, **kw)
        self._proc: subprocess.Popen | None = None
        self._buf = b""
        self._sent_at: float | None = None  # monotonic time of the request in flight
        self._t0 = 0.0  # wall time of the request in flight
        self.deadline_s = self.timeout_s + PARSE_S + START_S
        self._proc = self._spawn()  # its start (an interpreter, ~0.3-1.5 s) overlaps ours

    @property
    def busy(self) -> bool:
        return self._sent_at is not None

    def _spawn(self) -> subprocess.Popen:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        return subprocess.Popen([sys.executable, "-m", "kvviz.node.scrape_child", str(CHILD_MB)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, env=env, close_fds=True)

    def begin(self) -> bool:
        """Send one scrape request (False when one is still in flight)."""
        if self.busy:
            return False
        if self._proc is None or self._proc.poll() is not None:
            self._proc, self._buf = self._spawn(), b""
        line = json.dumps({"url": self.url, "timeout_s": self.timeout_s}) + "\n"
        self._t0, self._sent_at = time.time(), time.monotonic()
        try:
            self._proc.stdin.write(line.encode())  # type: ignore[union-attr]
            self._proc.stdin.flush()  # type: ignore[union-attr]
        except OSError:
            self._finish(self._failed(NodeStatus.GARBLED, "the scrape process ended"))
        return True

    def collect(self, wait_s: float = 0.0) -> NodeSample | None:
        """The finished scrape (handed to the sink), or None while it runs; past the deadline
        the worker is killed and the sample says so."""
        if not self.busy or self._proc is None:
            return None
        out = self._proc.stdout
        ready, _, _ = select.select([out], [], [], max(0.0, wait_s))
        if ready:
            chunk = os.read(out.fileno(), 1 << 20)  # type: ignore[union-attr]
            if not chunk:
                code = self._proc.wait()
                why = (f"signal {-code}" if code < 0 else f"exit {code}")
                return self._finish(self._failed(
                    NodeStatus.GARBLED, f"the scrape process died ({why}) reading the body"))
            self._buf += chunk
            if b"\n" in self._buf:
                line, _, self._buf = self._buf.partition(b"\n")
                return self._finish(self._answer(line))
            if len(self._buf) > ANSWER_MAX:
                self._kill()
                return self._finish(self._failed(NodeStatus.GARBLED, "the parsed body is "
                                                 f"larger than {ANSWER_MAX >> 20} MB"))
        if time.monotonic() - self._sent_at > self.deadline_s:  # type: ignore[operator]
            self._kill()
            return self._finish(self._failed(
                NodeStatus.TIMEOUT, f"no scrape within {self.deadline_s:g}s (fetch and parse; "
                "the scrape process was stopped)"))
        return None

    def step(self) -> NodeSample:
        """One scrape, blocking (Scraper's interface)."""
        self.begin()
        while True:
            got = self.collect(0.05)
            if got is not None:
                return got

    def close(self) -> None:
        """End the worker at once, whatever it is doing."""
        self._kill()
        self._sent_at = None

    def _kill(self) -> None:
        if self._proc is not None:
            if self._proc.poll() is None:
                self._proc.kill()
            self._proc.wait()
            for f in (self._proc.stdin, self._proc.stdout):
                try:
                    f.close()  # type: ignore[union-attr]
                except OSError:
                    pass
            self._proc, self._buf = None, b""

    def _failed(self, status: NodeStatus, message: str) -> NodeSample:
        return NodeSample(time=self._t0, url=self.url, status=status, message=printable(message),
                          latency_s=time.monotonic() - (self._sent_at or time.monotonic()))

    def _answer(self, line: bytes) -> NodeSample:
        try:
            return NodeSample.from_dict(json.loads(line))
        except Exception as exc:  # noqa: BLE001 - the worker is ours; its answer still checked
            return self._failed(NodeStatus.GARBLED, f"unreadable answer from the scrape "
                                f"process ({type(exc).__name__})")

    def _finish(self, sample: NodeSample) -> NodeSample:
        self._sent_at = None
        sample = with_rates(self._prev_ok, sample)
        if sample.ok:
            self._prev_ok = sample
        self.last = sample
        self.samples += 1
        self.sink(sample)
        return sample


def _limit(mb: int) -> None:
    """RLIMIT_DATA of `mb`, and (Linux) SIGKILL when the parent dies, whatever this is doing."""
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_DATA, (mb << 20, mb << 20))
    except (ImportError, ValueError, OSError):
        pass
    try:
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError, TypeError):
        pass


def main(argv: list[str]) -> int:
    """The worker: one request line in, one NodeSample line out, until stdin ends."""
    from kvviz.node.scrape import scrape_once

    mb = int(argv[0]) if argv else CHILD_MB
    _limit(mb)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is the command's to handle
    for line in sys.stdin.buffer:
        req = json.loads(line)
        t0 = time.time()
        try:
            sample = scrape_once(req["url"], timeout_s=float(req["timeout_s"]))
        except MemoryError:
            sample = NodeSample(time=t0, url=req["url"], status=NodeStatus.GARBLED,
                                message=f"parsing the body needed more than {mb} MB")
        except Exception as exc:  # noqa: BLE001 - one answer per request, whatever happened
            sample = NodeSample(time=t0, url=req["url"], status=NodeStatus.GARBLED,
                                message=printable(f"{type(exc).__name__}: {exc}"))
        sys.stdout.write(json.dumps(sample.to_dict(), separators=(",", ":")) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
