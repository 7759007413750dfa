"""kvviz's own KV-event publisher, compatible with vLLM's (and SGLang's array form).

A PUB socket sends `[topic, seq (8-byte big-endian), payload]`; a ROUTER socket (optional)
answers `[b"", start_seq]` as vLLM 0.32 does: `[b"", topic, seq, payload]` for every buffered
batch from start_seq, then `[b"", b"", -1, b""]` (replay_layout "legacy": `[b"", seq,
payload]`, then `[b"", -1, b""]`, as older releases did). Formats: "vllm" = array envelope
`[ts, events, dp_rank]` with events as maps tagged by "type"; "sglang" = the same envelope
with tagged-array events. Binds loopback unless the endpoint says otherwise. The replay socket
is served by its own thread.

An ipc://PATH endpoint: ZeroMQ's bind deletes whatever PATH is, so an existing PATH is
refused unless it is a socket nobody listens on (one a killed run left); the socket bound
here is removed on close (ZeroMQ leaves it).
"""
from __future__ import annotations

import os
import socket
import stat
import threading
import time
from collections import deque
from typing import Any

import msgspec
import zmq

FORMATS = ("vllm", "sglang")
_enc = msgspec.msgpack.Encoder()


def stored(hashes: list, parent: Any, token_ids: list, block_size: int, fmt: str,
           medium: str = "GPU") -> Any:
    if fmt == "vllm":
        return {"type": "BlockStored", "block_hashes": hashes, "parent_block_hash": parent,
                "token_ids": token_ids, "block_size": block_size, "lora_id": None,
                "medium": medium}
    return ["BlockStored", hashes, parent, token_ids, block_size, None, medium]


def cleared(fmt: str) -> Any:
    return {"type": "AllBlocksCleared"} if fmt == "vllm" else ["AllBlocksCleared"]


def removed(hashes: list, fmt: str, medium: str = "GPU") -> Any:
    if fmt == "vllm":
        return {"type": "BlockRemoved", "block_hashes": hashes, "medium": medium}
    return ["BlockRemoved", hashes, medium]


def claim_ipc(endpoint: str, flag: str = "--kv-events") -> str | None:
    """The file an ipc:// endpoint will bind (None: not ipc, or an abstract name); ValueError
    when that path exists and is anything but a stale socket, or is too long."""
    if not endpoint.startswith("ipc://") or endpoint.startswith("ipc://@"):
        return None
    from kvviz.node.kvevents.endpoints import check_endpoint

    try:
        check_endpoint(endpoint)
    except ValueError as exc:
        raise ValueError(f"{flag} {exc}") from None
    path = endpoint[len("ipc://"):]
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return path
    except OSError as exc:
        raise ValueError(f"{flag} {endpoint}: cannot check {path!r} ({exc.strerror})") from None
    if not stat.S_ISSOCK(st.st_mode):
        raise ValueError(f"{flag} {endpoint}: {path!r} exists and is not a socket; binding "
                         "there would delete it (choose another path)")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(path)
    except ConnectionRefusedError:
        return path  # stale: nobody listens
    except OSError as exc:
        raise ValueError(f"{flag} {endpoint}: cannot check the socket {path!r} "
                         f"({exc.strerror})") from None
    finally:
        probe.close()
    raise ValueError(f"{flag} {endpoint}: a process is listening on {path!r} already")


def _bound_file(path: str | None) -> tuple[int, int] | None:
    try:
        st = os.lstat(path) if path else None
    except OSError:
        return None
    return (st.st_dev, st.st_ino) if st is not None and stat.S_ISSOCK(st.st_mode) else None


def _remove_bound(path: str | None, ident: tuple[int, int] | None) -> None:
    if ident is not None and _bound_file(path) == ident:
        try:
            os.unlink(path)  # type: ignore[arg-type]
        except OSError:
            pass


class Publisher:
    def __init__(self, endpoint: str, replay: str | None = None, fmt: str = "vllm",
                 topic: str = "", dp_rank: int | None = None, buffer_steps: int = 10_000,
                 replay_layout: str = "0.32") -> None:
        if fmt not in FORMATS:
            raise ValueError(f"--kv-events-format: must be one of {list(FORMATS)}, got {fmt!r}")
        if replay_layout not in ("0.32", "legacy"):
            raise ValueError(f"replay_layout: '0.32' or 'legacy', got {replay_layout!r}")
        self.replay_layout = replay_layout
        self.fmt, self.topic, self.dp_rank = fmt, topic.encode(), dp_rank
        self.seq = 0
        self.last_ts, self.last_payload = 0.0, b""  # of the latest batch sent
        self.ctx = zmq.Context()
        self.ctx.linger = 0  # a context left to the GC must not wait on unsent messages
        self.pub = self.ctx.socket(zmq.PUB)
        self.pub.setsockopt(zmq.LINGER, 0)
        self.pub.setsockopt(zmq.SNDHWM, 100_000)
        self._buf: deque[tuple[int, bytes]] = deque(maxlen=buffer_steps)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._files: list[tuple[str | None, tuple[int, int] | None]] = []
        try:
            path = claim_ipc(endpoint)
            rpath = None if replay is None else claim_ipc(replay, "--kv-events-replay")
            if path is not None and path == rpath:
                raise ValueError(f"--kv-events-replay {replay}: the same path as --kv-events")
            self.pub.bind(endpoint)
            self._files.append((path, _bound_file(path)))
            if replay is not None:
                self.router = self.ctx.socket(zmq.ROUTER)
                self.router.setsockopt(zmq.LINGER, 0)
                self.router.bind(replay)
                self._files.append((rpath, _bound_file(rpath)))
                self._thread = threading.Thread(target=self._serve, daemon=True,
                                                name="kv-events-replay")
                self._thread.start()
        except zmq.ZMQError as exc:
            self.close()
            raise ValueError(f"--kv-events {endpoint}: cannot bind ({exc})") from None
        except ValueError:
            self.close()
            raise

    def publish(self, events: list, ts: float | None = None) -> int:
        """Send one batch; returns its seq."""
        ts = time.time() if ts is None else ts
        payload = _enc.encode([ts, events, self.dp_rank])
        self.last_ts, self.last_payload = ts, payload
        seq = self.seq
        with self._lock:
            self._buf.append((seq, payload))
        self.pub.send_multipart([self.topic, seq.to_bytes(8, "big", signed=True), payload])
        self.seq += 1
        return seq

    def _serve(self) -> None:
        while not self._stop.is_set():
            if not self.router.poll(100):
                continue
            frames = self.router.recv_multipart()
            if len(frames) < 3 or len(frames[-1]) != 8:
                continue
            ident, start = frames[0], int.from_bytes(frames[-1], "big", signed=True)
            with self._lock:
                todo = [(s, p) for s, p in self._buf if s >= start]
            new = self.replay_layout == "0.32"
            for s, p in todo:
                seq = s.to_bytes(8, "big", signed=True)
                self.router.send_multipart([ident, b"", self.topic, seq, p] if new
                                           else [ident, b"", seq, p])
            end = (-1).to_bytes(8, "big", signed=True)
            self.router.send_multipart([ident, b"", b"", end, b""] if new
                                       else [ident, b"", end, b""])

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2.0)
            self.router.close()
        self.ctx.destroy(linger=0)
        for path, ident in self._files:
            _remove_bound(path, ident)
        self._files = []


class Unpublished:
    """A Publisher without sockets: batches are numbered and encoded the same way (for a run
    that records its own stream, `kvviz collect --kv-events-record`), and sent nowhere."""

    def __init__(self, fmt: str = "vllm", dp_rank: int | None = None) -> None:
        if fmt not in FORMATS:
            raise ValueError(f"--kv-events-format: must be one of {list(FORMATS)}, got {fmt!r}")
        self.fmt, self.dp_rank, self.seq = fmt, dp_rank, 0
        self.last_ts, self.last_payload = 0.0, b""

    def publish(self, events: list, ts: float | None = None) -> int:
        self.last_ts = time.time() if ts is None else ts
        self.last_payload = _enc.encode([self.last_ts, events, self.dp_rank])
        self.seq += 1
        return self.seq - 1

    def close(self) -> None:
        pass
