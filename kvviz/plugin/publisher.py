"""The plugin's publisher: a bounded queue in front of a ZeroMQ PUB socket owned by a thread
of its own, so the engine never waits on the network or a subscriber.

`offer(msg)` is what the engine thread calls: it numbers the message and puts it in the queue
without blocking; when the queue is full the message is dropped and counted (the seq hole
tells the subscriber, which records a gap). The thread encodes (msgpack; the arrays are
bytes already) and sends with NOBLOCK (a PUB socket drops for a slow subscriber at its high
water mark itself); while the engine is idle the last message is sent again every second, so
a subscriber that joins late gets the pool at once. A socket that cannot be bound logs one
line and the publisher goes `failed`; the sampler then stops sampling: the server keeps
serving."""
from __future__ import annotations

import logging
import queue
import threading

from kvviz.plugin import wire

log = logging.getLogger("kvviz.plugin")
_STOP = object()
REPEAT_S = 1.0  # an idle engine's last sample is sent again this often (late joiners)


class Publisher:
    def __init__(self, endpoint: str, max_queue: int = 8, hwm: int = 16) -> None:
        self.endpoint = endpoint
        self.q: queue.Queue = queue.Queue(maxsize=max_queue)
        self.seq = 0
        self.dropped = 0
        self.sent = 0
        self.failed: str | None = None
        self.ready = threading.Event()
        self._hwm = hwm
        self._thread = threading.Thread(target=self._run, name="kvviz-blocks", daemon=True)
        self._thread.start()

    def offer(self, msg: dict) -> bool:
        """Queue one message (never blocks); False when it was dropped (queue full)."""
        self.seq += 1
        msg["dropped"] = self.dropped
        try:
            self.q.put_nowait((self.seq, msg))
            return True
        except queue.Full:
            self.dropped += 1
            return False

    def close(self, timeout: float = 2.0) -> None:
        try:
            self.q.put(_STOP, timeout=timeout)
        except queue.Full:
            pass
        self._thread.join(timeout)

    def _run(self) -> None:
        import zmq

        ctx = zmq.Context.instance()
        sock = ctx.socket(zmq.PUB)
        try:
            sock.setsockopt(zmq.SNDHWM, self._hwm)
            sock.setsockopt(zmq.LINGER, 0)
            sock.bind(self.endpoint)
        except (zmq.ZMQError, ValueError) as exc:
            self.failed = f"cannot bind {self.endpoint!r} ({exc})"
            log.error("kvviz blocks plugin: %s; not publishing (the server keeps serving)",
                      self.failed)
            sock.close(0)
            self.ready.set()
            return
        self.ready.set()
        last = None
        try:
            while True:
                try:
                    item = self.q.get(timeout=REPEAT_S)
                except queue.Empty:  # an idle engine: the last sample again, same seq
                    if last is not None:
                        self._send(sock, last)
                    continue
                if item is _STOP:
                    return
                seq, msg = item
                last = wire.frames(seq, wire.encode(msg))
                if not self._send(sock, last):
                    self.dropped += 1
        except Exception as exc:  # noqa: BLE001 (a guest: one line, never the host's problem)
            self.failed = f"publisher stopped ({type(exc).__name__}: {exc})"
            log.error("kvviz blocks plugin: %s", self.failed)
        finally:
            sock.close(0)

    def _send(self, sock, frames: list[bytes]) -> bool:
        import zmq

        try:
            sock.send_multipart(frames, flags=zmq.NOBLOCK)
            self.sent += 1
            return True
        except zmq.Again:
            return False
