"""A hostile KV-event node for the tests and benchmarks: a PUB and a ROUTER replay socket on
127.0.0.1 that misbehave on purpose until stopped (depth, size, floods, silence, garbage, gaps,
messages of many large frames).

`HostileNode(pub, router)` binds both on free ports and serves from two threads of this
process; `close()` stops and joins them. Each behaviour loops until stopped, so whatever
kvviz does, it is the client that must give up. `run_events(...)` runs `kvviz events` as a
child against it and returns its exit code, stderr, wall time and peak RSS (the child's own:
wait4's ru_maxrss of it, started by a bare launcher, tests/fuzz/kvevents_launch.py).
"""
from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import msgspec
import zmq

ROOT = Path(__file__).resolve().parents[2]
LAUNCHER = Path(__file__).with_name("kvevents_launch.py")
PUB_KINDS = ("silent", "garbage", "deep-array", "deep-map", "gaps", "flood", "big-topic",
             "big-batch", "worst-batch", "generic-bomb", "many-frames", "valid")
ROUTER_KINDS = ("none", "silent", "flood", "big", "garbage", "valid")
END = (-1).to_bytes(8, "big", signed=True)


def seq_bytes(s: int) -> bytes:
    return s.to_bytes(8, "big", signed=True)


def batch(i: int, events: int = 1) -> bytes:
    """A valid vLLM-style batch: `events` BlockStored of one 16-token block each."""
    evs = [{"type": "BlockStored", "block_hashes": [i * events + k + 1],
            "parent_block_hash": None, "token_ids": list(range(16)), "block_size": 16,
            "lora_id": None, "medium": "GPU"} for k in range(events)]
    return msgspec.msgpack.encode([time.time(), evs, 0])


_MARK = 2**64 - 1
_EV = msgspec.msgpack.encode({"type": "BlockStored", "block_hashes": [_MARK],
                              "parent_block_hash": None, "token_ids": list(range(16)),
                              "block_size": 16, "lora_id": None, "medium": "GPU"})
_EV_HEAD, _EV_TAIL = _EV.split(b"\xcf" + b"\xff" * 8)


def flood_batch(i: int, events: int = 100) -> bytes:
    """`batch(i, events)` (distinct hashes) spliced from bytes: ~0.3 us per event, so one
    thread offers millions of events per second."""
    base = i * events + 1
    body = b"".join(_EV_HEAD + b"\xcf" + (base + k).to_bytes(8, "big") + _EV_TAIL
                    for k in range(events))
    return (b"\x93\xcb" + msgspec.msgpack.encode(time.time())[1:] + b"\xdc"
            + events.to_bytes(2, "big") + body + b"\x00")


def deep(depth: int = 1000, form: str = "array") -> bytes:
    """A ~1 KB batch whose only event is nested `depth` deep (array or map form)."""
    head = msgspec.msgpack.encode([1.0, []])[:-1]  # [ts, <events list follows>
    if form == "map":
        head = msgspec.msgpack.encode({"ts": 1.0, "events": None})[:-1]
    return head + b"\x91" + b"\x91" * depth + b"\xc0"


def big_batch(nbytes: int) -> bytes:
    """A valid batch of about `nbytes`: one BlockStored whose token_ids are fixints."""
    n = max(16, nbytes - 200)
    head = msgspec.msgpack.encode([1.0, [{"type": "BlockStored", "block_hashes": [7],
                                          "parent_block_hash": None, "block_size": 16,
                                          "token_ids": None}], 0])
    cut = head.rindex(b"\xc0")  # token_ids: None -> array32 of n fixints
    return head[:cut] + b"\xdd" + n.to_bytes(4, "big") + b"\x01" * n + head[cut + 1:]


def worst_batch(nbytes: int) -> bytes:
    """A valid batch of about `nbytes` that decodes into the most Python objects per byte:
    one BlockRemoved of 2-byte bytes hashes (4 bytes each on the wire, ~43 in Python)."""
    k = max(1, (nbytes - 40) // 4)
    ev = b"\x92\xacBlockRemoved\xdd" + k.to_bytes(4, "big") + b"\xc4\x02ab" * k
    return _envelope(ev, 1)


def generic_bomb(nbytes: int) -> bytes:
    """A batch of `nbytes` empty arrays as events: outside the typed layouts, and ~260 bytes
    of Python objects per byte through a generic msgpack decoder."""
    return _envelope(b"\x90" * nbytes, nbytes)


def _envelope(events: bytes, count: int) -> bytes:
    """[ts, events (array32 of `count`), dp rank 0] around already encoded events."""
    return (b"\x93\xcb" + msgspec.msgpack.encode(1.0)[1:] + b"\xdd" + count.to_bytes(4, "big")
            + events + b"\x00")


class HostileNode:
    def __init__(self, pub: str, router: str = "none", *, big_bytes: int = 20 << 20,
                 flood_events: int = 100, frames: int = 64, valid_first: int = 0,
                 interleave: bool = False) -> None:
        """many-frames: once a subscriber has subscribed (an XPUB socket sees it), `valid_first`
        valid batches, then messages of topic, seq and `frames` frames of `big_bytes` each
        (zero-copy from one buffer: this process stays small); with `interleave`, each after
        a valid batch of big_bytes that decodes into the most objects (worst_batch)."""
        assert pub in PUB_KINDS and router in ROUTER_KINDS, (pub, router)
        self.pub_kind, self.router_kind = pub, router
        self.big_bytes, self.flood_events = big_bytes, flood_events
        self.frames, self.valid_first = frames, valid_first
        self.worst = worst_batch(big_bytes) if interleave else None
        self.ctx = zmq.Context()
        self.ctx.linger = 0  # a context left to the GC must not wait on unsent messages
        self.stop = threading.Event()
        self.sent = 0
        self.events_sent = 0  # flood: events handed to the PUB socket (it drops past its HWM)
        self.many = b"m" * big_bytes if pub == "many-frames" else b""
        self.subscribed = False
        self.pub = self.ctx.socket(zmq.XPUB if self.many else zmq.PUB)
        self.pub.setsockopt(zmq.LINGER, 0)
        self.pub.setsockopt(zmq.SNDHWM, (8 if interleave else 1) if self.many else 1000)
        port = self.pub.bind_to_random_port("tcp://127.0.0.1")
        self.endpoint = f"tcp://127.0.0.1:{port}"
        self.replay: str | None = None
        self.threads = [threading.Thread(target=self._publish, daemon=True)]
        if router != "none":
            self.router = self.ctx.socket(zmq.ROUTER)
            self.router.setsockopt(zmq.LINGER, 0)
            rport = self.router.bind_to_random_port("tcp://127.0.0.1")
            self.replay = f"tcp://127.0.0.1:{rport}"
            self.threads.append(threading.Thread(target=self._serve, daemon=True))
        for t in self.threads:
            t.start()

    def _send(self, frames: list[bytes]) -> None:
        try:
            self.pub.send_multipart(frames, zmq.NOBLOCK)
            self.sent += 1
        except zmq.Again:
            pass

    def _publish(self) -> None:
        rng = random.Random(0)
        kind, i = self.pub_kind, 0
        big = {"big-batch": big_batch, "worst-batch": worst_batch,
               "generic-bomb": generic_bomb}.get(kind, lambda _n: b"")(self.big_bytes)
        topic = b"t" * self.big_bytes if kind == "big-topic" else b""
        while not self.stop.is_set():
            if kind == "silent":
                self.stop.wait(0.05)
                continue
            if kind == "garbage":
                n = rng.choice([0, 1, 2, 3, 4, 7])
                self._send([rng.randbytes(rng.choice([0, 1, 8, 9, 300])) for _ in range(n)]
                           or [b""])
            elif kind.startswith("deep"):
                self._send([b"", seq_bytes(i), deep(1000, kind.split("-")[1])])
            elif kind == "gaps":  # every message skips one seq
                self._send([b"", seq_bytes(2 * i), batch(i)])
            elif kind == "flood":  # distinct blocks, as fast as one thread can
                self._send([b"", seq_bytes(i), flood_batch(i, self.flood_events)])
                self.events_sent += self.flood_events
                i += 1
                continue  # no pause
            elif kind == "big-topic":
                self._send([topic, seq_bytes(i), batch(i)])
            elif kind == "many-frames" and not self._subscribed():
                self.stop.wait(0.02)
                continue
            elif kind == "many-frames" and i >= self.valid_first:
                self._send_many(seq_bytes(i))
            elif kind in ("big-batch", "worst-batch", "generic-bomb"):
                self._send([b"", seq_bytes(i), big])
            else:  # valid
                self._send([b"", seq_bytes(i), batch(i)])
            i += 1
            self.stop.wait(0.02)

    def _send_many(self, seq: bytes) -> None:
        """One message of self.frames frames of big_bytes, every frame under the frame cap:
        ZeroMQ buffers all of them before it hands the message over."""
        try:
            if self.worst is not None:
                self.pub.send_multipart([b"", seq, self.worst], zmq.NOBLOCK, copy=False)
            self.pub.send_multipart([b"", seq] + [self.many] * self.frames, zmq.NOBLOCK,
                                    copy=False)
            self.sent += 1
        except zmq.Again:
            self.stop.wait(0.01)

    def _subscribed(self) -> bool:
        """many-frames (an XPUB): whether a subscription has arrived."""
        while not self.subscribed:
            try:
                self.subscribed = self.pub.recv(zmq.NOBLOCK)[:1] == b"\x01"
            except zmq.Again:
                break
        return self.subscribed

    def _serve(self) -> None:
        rng = random.Random(1)
        kind = self.router_kind
        big = b"x" * self.big_bytes if kind == "big" else b""
        while not self.stop.is_set():
            if not self.router.poll(50):
                continue
            frames = self.router.recv_multipart()
            ident = frames[0]
            if kind == "silent":
                continue
            start = int.from_bytes(frames[-1], "big", signed=True) if len(frames[-1]) == 8 \
                else 0
            if kind == "valid":
                for s in range(max(0, start), max(0, start) + 3):
                    self.router.send_multipart([ident, b"", seq_bytes(s), batch(s)])
                self.router.send_multipart([ident, b"", END, b""])
                continue
            end = time.monotonic() + 5.0  # answer this request for 5 s, never ending it
            s = max(0, start)
            while not self.stop.is_set() and time.monotonic() < end:
                if kind == "flood":
                    fr = [ident, b"", seq_bytes(s), batch(s)]
                elif kind == "big":
                    fr = [ident, b"", seq_bytes(s), big]
                    self.stop.wait(0.05)
                else:  # garbage
                    fr = [ident] + [rng.randbytes(rng.choice([0, 3, 8, 50]))
                                    for _ in range(rng.choice([0, 1, 2, 5]))]
                try:
                    self.router.send_multipart(fr, zmq.NOBLOCK)
                except zmq.ZMQError:
                    self.stop.wait(0.001)
                s += 1

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(10)
        self.ctx.destroy(linger=0)


@dataclass
class Outcome:
    code: int
    stderr: str
    wall_s: float  # from start (or from the signal, when one was sent) to exit
    peak_rss_mb: float


def run_events(argv: list[str], *, signal_after_s: float | None = None,
               limit_s: float = 60.0, nofile: int | None = None,
               ready: Path | None = None,
               pause: tuple[float, float] | None = None, command: str = "events") -> Outcome:
    """`python -m kvviz events ARGV` (or another `command`) as a child: its exit code,
    stderr, time and peak RSS.
    With signal_after_s, SIGTERM is sent then (counted from when `ready` exists, when given:
    the recording, so a slow interpreter start on a loaded machine is not what is timed)
    and wall_s counts from it. pause=(stop_s, run_s): until then, the child is stopped
    (SIGSTOP) for stop_s every run_s, as a starved process would be. A child still running
    at limit_s is killed (SIGKILL, by its PID) and reported as code -9.

    The child is started by tests/fuzz/kvevents_launch.py, a bare interpreter, so that its
    peak RSS (wait4's ru_maxrss) is its own and not this process's: a child forked by a
    1 GB pytest worker reads 1 GB (that launcher's docstring says why)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("KVVIZ_PARENT_PID", None)
    work = Path(tempfile.mkdtemp(prefix="kvviz-events-"))
    job = {"argv": [sys.executable, "-m", "kvviz", command, *argv], "limit_s": limit_s,
           "signal_after_s": signal_after_s, "nofile": nofile, "pause": pause,
           "ready": None if ready is None else str(ready), "stderr": str(work / "err"),
           "pidfile": str(work / "pid")}
    (work / "job.json").write_text(json.dumps(job))
    try:
        try:
            r = subprocess.run([sys.executable, "-I", "-S", str(LAUNCHER),
                                str(work / "job.json")], env=env, stdin=subprocess.DEVNULL,
                               capture_output=True, text=True, timeout=limit_s + 30)
        except BaseException:  # the launcher was killed before its child ended: end it too
            with contextlib.suppress(OSError, ValueError):
                os.kill(int((work / "pid").read_text()), signal.SIGKILL)
            raise
        if r.returncode != 0 or not r.stdout.strip():
            raise AssertionError(f"the launcher failed (exit {r.returncode}): {r.stderr[-2000:]}")
        got = json.loads(r.stdout)
        text = (work / "err").read_text(errors="replace")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return Outcome(got["code"], text, got["wall_s"], got["peak_rss_kb"] / 1024)
