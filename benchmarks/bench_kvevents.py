"""KV-event subscriber throughput: events/s decoded, applied to the prefix-cache model and
written to a recording (kv_batches rows, WAL, a commit every 0.5 s of wall time).

Both wall-clock and CPU-time rates are given (this process's CPU seconds: the "one core"
figure, which a busy shared machine does not distort). "pipeline": payloads handed to
Subscriber.handle in this process (decode + model + store), one core. "socket": a publisher
in a child process sends the same batches over tcp://127.0.0.1 and this process receives
them through Subscriber.poll (target: >= 200k events/s).
Events: BlockStored of one 16-token block chained to the previous one (the worst case per
block), and every 4th event a BlockRemoved of an older block; 100 events a batch.

    python benchmarks/bench_kvevents.py [--events 400000] [--batch 100] [--json]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kvviz.node.kvevents.store import KvEventWriter  # noqa: E402
from kvviz.node.kvevents.subscriber import Subscriber, SubscriberConfig  # noqa: E402
from kvviz.store.writer import RunWriter  # noqa: E402

_PUB = r"""
import sys, time, zmq
port, n = int(sys.argv[1]), int(sys.argv[2])
payloads = [sys.stdin.buffer.read(int(sys.stdin.buffer.readline())) for _ in range(n)]
ctx = zmq.Context(); s = ctx.socket(zmq.PUB); s.setsockopt(zmq.SNDHWM, 0)
s.bind(f"tcp://127.0.0.1:{port}")
time.sleep(1.0)
for i, p in enumerate(payloads):
    s.send_multipart([b"", i.to_bytes(8, "big"), p])
    if i == 0:
        time.sleep(0.5)  # the receiver starts its clock on the first batch
time.sleep(1.0)
"""


def payloads(events: int, batch: int, enc: str) -> list[bytes]:
    out, h = [], 1
    for b0 in range(0, events, batch):
        evs = []
        for i in range(b0, min(events, b0 + batch)):
            if i % 4 == 3:
                evs.append({"type": "BlockRemoved", "block_hashes": [h - 40], "medium": "GPU"}
                           if enc == "map" else ["BlockRemoved", [h - 40], "GPU"])
                continue
            tok = list(range(i, i + 16))
            evs.append({"type": "BlockStored", "block_hashes": [h], "parent_block_hash": h - 1,
                        "token_ids": tok, "block_size": 16, "lora_id": None, "medium": "GPU"}
                       if enc == "map" else ["BlockStored", [h], h - 1, tok, 16, None, "GPU"])
            h += 1
        out.append(msgspec.msgpack.encode([time.time(), evs, 0]))
    return out


def _recorder(tmp: Path, port: int) -> tuple[RunWriter, KvEventWriter, Subscriber]:
    w = RunWriter(tmp / f"b{port}.db", {"mode": "kv-events"})
    kv = KvEventWriter(w.conn)
    return w, kv, Subscriber(SubscriberConfig((f"tcp://127.0.0.1:{port}",)), kv)


def pipeline(data: list[bytes], n_events: int, tmp: Path, port: int) -> tuple[float, float]:
    w, kv, sub = _recorder(tmp, port)
    st = sub.streams[0]
    c0 = time.process_time()
    t0 = last = time.perf_counter()
    for i, p in enumerate(data):
        sub.handle(st, [b"", i.to_bytes(8, "big"), p])
        now = time.perf_counter()
        if now - last >= 0.5:
            kv.flush()
            w.commit()
            last = now
    kv.flush()
    w.commit()
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    assert st.events == n_events and st.undecodable == 0
    sub.close()
    w.close()
    return n_events / dt, n_events / cpu


def socket(data: list[bytes], n_events: int, tmp: Path, port: int) -> tuple[float, float]:
    w, kv, sub = _recorder(tmp, port)
    st = sub.streams[0]
    pub = subprocess.Popen([sys.executable, "-c", _PUB, str(port), str(len(data))],
                           stdin=subprocess.PIPE)
    assert pub.stdin is not None
    for p in data:
        pub.stdin.write(b"%d\n" % len(p) + p)
    pub.stdin.close()
    deadline = time.monotonic() + 120
    while st.batches == 0 and time.monotonic() < deadline:
        sub.poll(10, max_messages=1)
    first = st.events
    c0 = time.process_time()
    t0 = last = time.perf_counter()
    while st.batches < len(data) and time.monotonic() < deadline:
        sub.poll(10)
        now = time.perf_counter()
        if now - last >= 0.5:
            kv.flush()
            w.commit()
            last = now
    kv.flush()
    w.commit()
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    pub.wait(30)
    got = st.events - first
    assert st.events == n_events, f"received {st.events} of {n_events} events"
    sub.close()
    w.close()
    return got / dt, got / cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=400_000)
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--port", type=int, default=47557)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for k, enc in enumerate(("map", "array")):
            data = payloads(a.events, a.batch, enc)
            mb = sum(map(len, data)) / 2**20
            for kind, fn in (("pipeline", pipeline), ("socket", socket)):
                rate, cpu_rate = fn(data, a.events, Path(d), a.port + 2 * k + (kind == "socket"))
                rows.append({"path": kind, "encoding": enc, "events": a.events,
                             "batch": a.batch, "payload_mb": round(mb, 1),
                             "events_per_s": round(rate), "events_per_cpu_s": round(cpu_rate),
                             "load_avg_1m": round(os.getloadavg()[0], 1)})
    if a.json:
        print(json.dumps(rows))
    else:
        for r in rows:
            print(f"{r['path']:9s} {r['encoding']:6s} {r['events']} events in batches of "
                  f"{r['batch']} ({r['payload_mb']} MiB): {r['events_per_s']:,} events/s wall, "
                  f"{r['events_per_cpu_s']:,} per CPU-second (load {r['load_avg_1m']})")


if __name__ == "__main__":
    main()
