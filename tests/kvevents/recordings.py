"""A small kv-events recording written through the real subscriber path (no sockets)."""
from __future__ import annotations

from pathlib import Path

from kvviz.node.kvevents.store import KvEventWriter
from kvviz.node.kvevents.subscriber import Subscriber, SubscriberConfig
from kvviz.store.writer import RunWriter
from tests.kvevents.schema_pub import payload, remove, store


def write_kv_recording(path: Path, port: int, *, close: bool = True) -> RunWriter:
    """Two pods with the same prompts but different hash seeds; pod a has a gap, churn of a hot
    prefix, and prompts sharing 6 tokens in blocks of 16 (never a shared block)."""
    w = RunWriter(path, {"mode": "kv-events", "lanes": []})
    kv = KvEventWriter(w.conn)
    eps = (f"tcp://127.0.0.1:{port}", f"tcp://127.0.0.1:{port + 1}")
    sub = Subscriber(SubscriberConfig(eps), kv)
    a, b = sub.streams
    system = list(range(6))
    seq = {a.sid: 0, b.sid: 0}

    def send(st, events, skip: int = 0) -> None:
        seq[st.sid] += skip
        sub.handle(st, [b"", seq[st.sid].to_bytes(8, "big"), payload(events)])
        seq[st.sid] += 1

    for i in range(8):
        toks = system + [100 + i] * 10 + list(range(16))
        send(a, [store([1000 + i, 2000 + i], None, 16, tokens=toks)])
        send(b, [store([5000 + i, 6000 + i], None, 16, "array", tokens=toks)])
    for _ in range(3):  # the same prefix evicted and stored again: churn
        send(a, [remove([1000])])
        send(a, [store([1000], None, 16, tokens=system + [100] * 10)])
    send(a, [store([3000], 1001, 16)], skip=2)  # two batches lost, no replay socket
    kv.flush()
    sub.close()
    if close:
        w.close()
    return w
