"""A small kv-events recording written through the real subscriber path (no sockets)."""
from __future__ import annotations

from pathlib import Path

from kvviz.node.kvevents.subscriber import Subscriber, SubscriberConfig
from kvviz.store.writer import RunWriter
from tests.kvevents.schema_pub import payload, remove, store


def write_kv_recording(path: Path, port: int, *, close: bool = True) -> RunWriter:
    """Two pods with the same prompts but different hash seeds; pod a has a gap, churn of a hot
    prefix, and prompts sharing 6 tokens in blocks of 16 (never a shared block)."""
    w = RunWriter(path, {"mode": "kv-events", "lanes": []})
    kv = w.kv_events()
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


def write_attach_recording(path: Path, port: int, waiting: int = 3) -> None:
    """What `kvviz attach` writes: a node recording (mode "node", attach) whose file also holds
    the KV-event tables (those of write_kv_recording) of the same node."""
    import sqlite3

    src = path.with_name(path.stem + "-events-src.db")
    write_kv_recording(src, port)
    w = RunWriter(path, {"mode": "node", "url": "http://a:8000/metrics", "lanes": [],
                         "attach": True})
    for i in range(3):
        w.add_node_sample(float(i), {"time": 1e9 + i, "url": "http://a:8000/metrics",
                                     "status": "ok", "message": "", "engine": "vllm",
                                     "kv_usage": 0.02, "num_running": 2,
                                     "num_waiting": waiting, "block_size": 16,
                                     "num_gpu_blocks": 1000}, {})
    w.close()
    con = sqlite3.connect(path)
    con.execute("ATTACH DATABASE ? AS src", (str(src),))
    for t in ("kv_streams", "kv_batches", "kv_gaps"):
        con.execute(f"CREATE TABLE {t} AS SELECT * FROM src.{t}")
    con.commit()
    con.execute("DETACH DATABASE src")
    con.close()
    src.unlink()
