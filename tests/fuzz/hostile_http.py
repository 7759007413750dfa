"""A /metrics server built to hurt a scraper (tests/fuzz/test_attach_scrape_isolation.py,
benchmarks/floods.py's round-3 rows), served by threads of this process on 127.0.0.1."""
from __future__ import annotations

import functools
import http.server
import threading
import time


@functools.cache
def body(path: str) -> bytes | None:
    """/metrics: 1.6M tiny series (~17 MB); /heavy: 45,000 series (under the cap) of long
    labels (~27 MB, ~40 s to parse on a loaded 2-core VM); built once, when first asked."""
    if path == "/metrics":
        return "".join(f"s{i} 1\n" for i in range(1_600_000)).encode()
    if path == "/heavy":
        labels = ",".join(f'l{j}="{"x" * 90}{{i}}"' for j in range(6))
        return "".join("vllm:num_requests_running{" + labels.replace("{i}", str(i)) + "} 1\n"
                       for i in range(45_000)).encode()
    return None


class Hostile:
    """/metrics and /heavy: `body` at once; /drip: a body one byte every 0.2 s, forever."""

    def __init__(self) -> None:
        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a: object) -> None:
                pass

            def do_GET(self) -> None:
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "text/plain")
                    data = body(self.path)
                    if data is not None:
                        self.send_header("Content-Length", str(len(data)))
                        self.end_headers()
                        self.wfile.write(data)
                        return
                    self.end_headers()
                    while True:
                        self.wfile.write(b"#")
                        self.wfile.flush()
                        time.sleep(0.2)
                except OSError:
                    pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()
