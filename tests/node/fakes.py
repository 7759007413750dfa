"""A fake serving node on 127.0.0.1: fixture metrics, plus slow, garbled and failing endpoints."""
from __future__ import annotations

import http.server
import threading
import time
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
VLLM_TEXT = (FIXTURES / "vllm_metrics.txt").read_text()
SGLANG_TEXT = (FIXTURES / "sglang_metrics.txt").read_text()
SLOW_S = 1.5


def counter_text(n: int) -> str:
    """vLLM-shaped body whose counters grow by fixed steps per request n = 0, 1, 2, ..."""
    return (
        "# TYPE vllm:kv_cache_usage_perc gauge\n"
        f'vllm:kv_cache_usage_perc{{engine="0",model_name="m"}} {0.1 * (n % 10)}\n'
        "# TYPE vllm:num_preemptions_total counter\n"
        f'vllm:num_preemptions_total{{engine="0",model_name="m"}} {10 + 3 * n}\n'
        "# TYPE vllm:prefix_cache_queries_total counter\n"
        f'vllm:prefix_cache_queries_total{{engine="0",model_name="m"}} {1000 + 100 * n}\n'
        "# TYPE vllm:prefix_cache_hits_total counter\n"
        f'vllm:prefix_cache_hits_total{{engine="0",model_name="m"}} {500 + 40 * n}\n'
    )


class FakeNode:
    """Routes: /metrics (vLLM), /sglang/metrics, /counter, /flaky (every 2nd request 503),
    /slow (sleeps SLOW_S), /trickle (a byte every 0.1 s), /garbled (HTML), /binary, /error,
    /moved (302 to /metrics), /moved-to-file (302 to file://), /moved-to-ip (302 to the same
    server spelled 127.0.0.1)."""

    def __init__(self) -> None:
        self.hits: dict[str, int] = {}
        self.server_info: bytes | None = None  # /server_info's answer (None: 404, no dev mode)
        self.lock = threading.Lock()
        node = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                with node.lock:
                    n = node.hits.get(self.path, 0)
                    node.hits[self.path] = n + 1
                node.route(self, n)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.server.block_on_close = False
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)

    @staticmethod
    def send(h: http.server.BaseHTTPRequestHandler, body: bytes | str, code: int = 200,
             ctype: str = "text/plain; version=0.0.4") -> None:
        data = body.encode() if isinstance(body, str) else body
        h.send_response(code)
        h.send_header("Content-Type", ctype)
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    def route(self, h: http.server.BaseHTTPRequestHandler, n: int) -> None:
        path = h.path
        try:
            if path == "/metrics":
                self.send(h, VLLM_TEXT)
            elif path == "/sglang/metrics":
                self.send(h, SGLANG_TEXT)
            elif path == "/counter":
                self.send(h, counter_text(n))
            elif path == "/flaky":
                self.send(h, counter_text(n // 2) if n % 2 == 0 else "busy", 200 if n % 2 == 0
                          else 503)
            elif path == "/slow":
                time.sleep(SLOW_S)
                self.send(h, VLLM_TEXT)
            elif path == "/trickle":
                h.send_response(200)
                h.send_header("Content-Length", "1000")
                h.end_headers()
                for _ in range(int(SLOW_S / 0.1)):
                    h.wfile.write(b"#")
                    h.wfile.flush()
                    time.sleep(0.1)
            elif path == "/garbled":
                self.send(h, "<html><body><h1>Welcome to nginx!</h1></body></html>",
                          ctype="text/html")
            elif path == "/binary":
                self.send(h, bytes(range(128, 256)), ctype="application/octet-stream")
            elif path in ("/moved", "/moved-to-file", "/moved-to-ip"):
                h.send_response(302)
                h.send_header("Location", {
                    "/moved": "/metrics", "/moved-to-file": "file:///etc/passwd",
                    "/moved-to-ip": f"http://127.0.0.1:{self.server.server_address[1]}/metrics",
                }[path])
                h.send_header("Content-Length", "0")
                h.end_headers()
            elif path == "/server_info?config_format=json" and self.server_info is not None:
                self.send(h, self.server_info, ctype="application/json")
            elif path == "/error":
                self.send(h, "internal error", 500)
            else:
                self.send(h, "not found", 404)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the scraper gave up first (timeout tests)

    def url(self, path: str) -> str:
        return self.base + path
