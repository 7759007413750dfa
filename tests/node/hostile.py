"""A hostile HTTP server on 127.0.0.1: each path is one way of never giving a proper answer.

Raw sockets (not http.server), so it can break HTTP at any byte. Every behaviour loops until
the client goes away or the server is closed. `python -m tests.node.hostile` prints the
table recorded in docs/RELIABILITY.md (time to give up, result, peak traced memory).
"""
from __future__ import annotations

import socket
import socketserver
import threading
import time
from collections.abc import Callable

DRIP_S = 0.05
Write = Callable[[bytes], None]


def _drip(write: Write, stop: threading.Event, data: bytes, forever: bool = True) -> None:
    while not stop.is_set():
        for b in data:
            write(bytes([b]))
            if stop.wait(DRIP_S):
                return
        if not forever:
            return


def _flood(write: Write, stop: threading.Event, data: bytes, pause: float = 0.0) -> None:
    while not stop.is_set():
        write(data)
        if pause:
            stop.wait(pause)


OK = b"HTTP/1.1 200 OK\r\n"
METRICS = b'vllm:num_requests_running{engine="0"} 1\n'

# path -> (what the server does, handler(write, stop))
BEHAVIOURS: dict[str, tuple[str, Callable[[Write, threading.Event], None]]] = {
    "/never": ("accepts, reads the request, never answers",
               lambda w, s: s.wait()),
    "/drip-status": ("drips the status line, one byte per 50 ms, forever",
                     lambda w, s: _drip(w, s, b"HTTP/1.1 200 OK" + b" " * 10_000)),
    "/drip-headers": ("status line, then header bytes dripped forever",
                      lambda w, s: (w(OK), _drip(w, s, b"X-Slow: " + b"a" * 100_000))),
    "/continue-flood": ("floods `100 Continue` interim answers, never a final one",
                        lambda w, s: _flood(w, s, b"HTTP/1.1 100 Continue\r\n\r\n", 0.001)),
    "/continue-drip": ("`100 Continue` answers dripped byte by byte",
                       lambda w, s: _drip(w, s, b"HTTP/1.1 100 Continue\r\n\r\n")),
    "/endless-headers": ("header lines forever",
                         lambda w, s: (w(OK), _flood(w, s, b"X-A: b\r\n" * 64))),
    "/long-header": ("one header line that never ends",
                     lambda w, s: (w(OK + b"X-A: "), _flood(w, s, b"a" * 65536))),
    "/endless-body": ("headers, then a body with no length, forever",
                      lambda w, s: (w(OK + b"Content-Type: text/plain\r\n\r\n"),
                                    _flood(w, s, METRICS * 1000))),
    "/huge-body": ("Content-Length: 10 GB, sent as fast as possible",
                   lambda w, s: (w(OK + b"Content-Length: 10000000000\r\n\r\n"),
                                 _flood(w, s, b"#" * 65536))),
    "/drip-body": ("a valid body dripped byte by byte, with no length",
                   lambda w, s: (w(OK + b"\r\n"), _drip(w, s, METRICS))),
    "/drip-chunked": ("chunked body, one 1-byte chunk per 50 ms, forever",
                      lambda w, s: (w(OK + b"Transfer-Encoding: chunked\r\n\r\n"),
                                    _drip_chunks(w, s))),
    "/redirect-loop": ("302 to itself, forever",
                       lambda w, s: w(b"HTTP/1.1 302 Found\r\nLocation: /redirect-loop\r\n"
                                      b"Content-Length: 0\r\n\r\n")),
    "/drip-redirects": ("302 to a new dripping path each time, each answer dripped",
                        lambda w, s: _drip(w, s, b"HTTP/1.1 302 Found\r\nLocation: "
                                           b"/drip-redirects\r\nContent-Length: 0\r\n\r\n",
                                           forever=False)),
}


def _drip_chunks(write: Write, stop: threading.Event) -> None:
    while not stop.wait(DRIP_S):
        write(b"1\r\n#\r\n")


class HostileServer:
    """`with HostileServer() as srv: srv.url("/never")`."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        stop = self.stop

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                sock: socket.socket = self.request
                sock.settimeout(5.0)
                head = b""
                try:
                    while b"\r\n\r\n" not in head and len(head) < 65536:
                        got = sock.recv(4096)
                        if not got:
                            return
                        head += got
                    path = head.split(b" ", 2)[1].decode("latin-1").split("?")[0]
                    path = path.removesuffix("/api/v1/query")  # the fleet's queries
                    behaviour = BEHAVIOURS.get(path)
                    if behaviour is None:
                        sock.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                        return
                    behaviour[1](sock.sendall, stop)
                except OSError:
                    pass  # the client gave up: what the tests expect

        socketserver.ThreadingTCPServer.allow_reuse_address = True
        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.server.block_on_close = False
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,),
                                       daemon=True)

    def url(self, path: str) -> str:
        return self.base + path

    def __enter__(self) -> HostileServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.server.shutdown()
        self.server.server_close()


def main(timeout_s: float = 2.0) -> None:
    import tracemalloc

    from kvviz.node.fleet import FleetError, query
    from kvviz.node.scrape import scrape_once

    print(f"| Server behaviour | kvviz scrape --timeout {timeout_s:g} gives up after | result "
          "| peak traced memory | fleet query gives up after |")
    print("|---|---|---|---|---|")
    with HostileServer() as srv:
        for path, (what, _) in BEHAVIOURS.items():
            tracemalloc.start()
            t0 = time.monotonic()
            s = scrape_once(srv.url(path), timeout_s=timeout_s, max_bytes=4 * 2**20)
            took = time.monotonic() - t0
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            t0 = time.monotonic()
            try:
                query(srv.url(path), "up", timeout_s=timeout_s)
            except FleetError:
                pass
            fleet = time.monotonic() - t0
            print(f"| {what} | {took:.2f} s | {s.status}: {s.message[:60]} "
                  f"| {peak / 2**20:.1f} MiB | {fleet:.2f} s |")


if __name__ == "__main__":
    main()
