"""HTTP GET bounded in time and size, for scrapes and Prometheus queries.

`timeout_s` is a deadline for the whole request: connect, status line, headers (a server that
drips them a byte at a time, or floods `100 Continue`), redirects and body. A timer shuts the
request's sockets down when it passes, which wakes any read blocked on them; the body is cut at
`max_bytes`. Headers are bounded by http.client (100 lines of 64 KiB). Not bounded: the DNS
look-up of the host name (the system resolver's own timeouts apply).

Every connection is checked against KVVIZ_SCRAPE_ALLOW after connect (redirects included); with
an allow-list, or for a loopback URL, proxies from the environment are not used.
"""
from __future__ import annotations

import functools
import http.client
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass

from kvviz.core.errors import KvvizError
from kvviz.node.trust import ScrapeAllow

_CHUNK = 64 * 1024


class BodyTooLargeError(KvvizError):
    """The answer's body is larger than the cap."""


@dataclass(frozen=True)
class HttpAnswer:
    status: int  # HTTP status code of the final answer (after redirects)
    reason: str
    body: bytes


def is_loopback_host(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class _Guard:
    """The request's deadline: shuts down every socket it watches when the time is up."""

    def __init__(self, timeout_s: float, allow: ScrapeAllow) -> None:
        self.end = time.monotonic() + timeout_s
        self.allow = allow
        self.expired = False
        self._socks: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(timeout_s, self._fire)
        self._timer.daemon = True
        self._timer.start()

    def remaining(self) -> float:
        return max(0.001, self.end - time.monotonic())

    def passed(self) -> bool:
        return self.expired or time.monotonic() >= self.end

    def connect(self, host: str, address: tuple[str, int], timeout: object = None,
                source_address: tuple[str, int] | None = None) -> socket.socket:
        """socket.create_connection within the deadline; the socket is watched from then on
        (TLS handshake included) and its peer checked against the allow-list."""
        sock = socket.create_connection(address, self.remaining(), source_address)
        with self._lock:
            self._socks.append(sock)
            late = self.expired
        if late:
            _shutdown(sock)
        try:
            self.allow.check_peer(host, str(sock.getpeername()[0]))
        except BaseException:
            sock.close()
            raise
        return sock

    def _fire(self) -> None:
        with self._lock:
            self.expired = True
            socks = list(self._socks)
        for sock in socks:
            _shutdown(sock)

    def cancel(self) -> None:
        self._timer.cancel()


def _shutdown(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # already closed or never connected


def _guarded(cls: type[http.client.HTTPConnection], guard: _Guard, *args, **kwargs,
             ) -> http.client.HTTPConnection:
    """An http.client connection whose sockets come from `guard.connect`."""
    conn = cls(*args, **kwargs)
    conn.timeout = guard.remaining()
    conn._create_connection = functools.partial(guard.connect, conn.host)  # type: ignore
    return conn


class _HttpHandler(urllib.request.HTTPHandler):
    def __init__(self, guard: _Guard) -> None:
        super().__init__()
        self._guard = guard

    def http_open(self, req):
        return self.do_open(functools.partial(_guarded, http.client.HTTPConnection,
                                              self._guard), req)


class _HttpsHandler(urllib.request.HTTPSHandler):
    def __init__(self, guard: _Guard) -> None:
        super().__init__()
        self._guard = guard

    def https_open(self, req):
        return self.do_open(functools.partial(_guarded, http.client.HTTPSConnection,
                                              self._guard), req,
                            context=self._context)


class _HttpOnlyRedirects(urllib.request.HTTPRedirectHandler):
    max_redirections = 5

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        if urllib.parse.urlsplit(newurl).scheme not in ("http", "https"):
            raise urllib.error.HTTPError(newurl, code, f"redirect to {newurl!r} refused",
                                         headers, fp)
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def _read_capped(resp, guard: _Guard, max_bytes: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk = resp.read1(_CHUNK)
        if not chunk:
            break
        size += len(chunk)
        if size > max_bytes:
            raise BodyTooLargeError(f"body larger than {max_bytes} bytes")
        chunks.append(chunk)
    if guard.passed():
        raise TimeoutError("deadline passed while reading the body")
    if getattr(resp, "length", None):  # Content-Length promised more than arrived
        raise http.client.IncompleteRead(b"".join(chunks), resp.length)
    return b"".join(chunks)


def get(url: str, *, timeout_s: float, max_bytes: int, accept: str = "*/*",
        allow: ScrapeAllow | None = None) -> HttpAnswer:
    """GET `url` within `timeout_s` seconds in all; an HTTP error status is an answer too.

    Raises TimeoutError when the deadline passes, BodyTooLargeError, ScrapeNotAllowedError
    (a host outside `allow`, default KVVIZ_SCRAPE_ALLOW, redirects included), and OSError,
    http.client.HTTPException or ValueError for other failures.
    """
    allow = ScrapeAllow.from_env() if allow is None else allow
    allow.check_host(urllib.parse.urlsplit(url).hostname or "")
    guard = _Guard(timeout_s, allow)
    handlers: list = [_HttpHandler(guard), _HttpsHandler(guard), _HttpOnlyRedirects()]
    if not allow.anything or is_loopback_host(urllib.parse.urlsplit(url).hostname or ""):
        handlers.append(urllib.request.ProxyHandler({}))
    opener = urllib.request.build_opener(*handlers)
    req = urllib.request.Request(url, headers={"Accept": accept})
    try:
        try:
            with opener.open(req, timeout=guard.remaining()) as resp:
                return HttpAnswer(resp.status, str(resp.reason), _read_capped(resp, guard,
                                                                              max_bytes))
        except urllib.error.HTTPError as exc:
            body = b"" if exc.fp is None else _read_capped(exc, guard, max_bytes)
            return HttpAnswer(exc.code, str(exc.reason), body)
    except (OSError, http.client.HTTPException, ValueError) as exc:
        if guard.passed() or _is_timeout(exc):
            raise TimeoutError(f"no complete answer within {timeout_s:g}s") from exc
        raise
    finally:
        guard.cancel()


def _is_timeout(exc: BaseException) -> bool:
    if isinstance(exc, (TimeoutError, socket.timeout)):
        return True
    reason = getattr(exc, "reason", None)
    return isinstance(reason, (TimeoutError, socket.timeout))
