"""Untrusted inputs: KV-event streams, pickle bombs and trace files, how fast each is read.

    python benchmarks/bench_inputs.py events [--events 400000] [--batch 100] [--json]
    python benchmarks/bench_inputs.py pickles [--only SUBSTRING] [--json]
    python benchmarks/bench_inputs.py traces [--rows 1000000] [--repeats 3] [--json]
    python benchmarks/bench_inputs.py floods [--seconds 10] [--only SUBSTRING] [--json]
    python benchmarks/bench_inputs.py round3 [--seconds 4] [--only SUBSTRING] [--json]
    python benchmarks/bench_inputs.py round3 --only export [--samples 1000000]
    python benchmarks/bench_inputs.py round3 --only events [--engine-events 10000000]

events: KV-event subscriber throughput, events/s decoded, applied to the prefix-cache model
  and written to a recording (kv_batches rows, WAL, a commit every 0.5 s of wall time), in
  wall and CPU time (this process's CPU seconds: the "one core" figure, which a busy shared
  machine does not distort). "pipeline": payloads handed to Subscriber.handle in this
  process; "socket": a publisher child sends the same batches over tcp://127.0.0.1 and this
  process receives them through Subscriber.poll. Events: BlockStored of one 16-token block
  chained to the previous one (the worst case per block), every 4th a BlockRemoved of an
  older block. Target: >= 200k events/s on one core.
pickles: each input parsed exactly as `kvviz torch-snapshot FILE` does (a child with
  parse_limits(size)); peak memory is the child's ru_maxrss, time the parent's wall clock
  from spawn to verdict. Two legitimate snapshots give the reference; one control row runs
  the deep-tuple bomb through a plain pickle.loads in the same sandbox (what the opcode
  pre-pass prevents). Without --json: the Markdown table of docs/RELIABILITY.md.
traces: synthetic files in the published layouts (Azure CSV with 7-digit fractional
  timestamps, BurstGPT CSV, kvviz CSV, Mooncake JSONL) read with `kvviz.traces.read_trace`;
  the best wall and CPU time of --repeats reads. Target: >= 1M rows/s for the CSV formats.
floods: `kvviz events` recording a hostile node (benchmarks/floods.py: floods, 100 MB
  batches, 16 MB batches that decode into the most objects or only generically, 50 MB topic
  frames, replay sockets that flood, stall or send 50 MB answers), sent
  SIGTERM --seconds after its recording exists: its peak RSS and the time from SIGTERM to
  exit. Targets: peak RSS under 1 GB, exit within 1 s of SIGTERM. Without --json: the table
  of docs/RELIABILITY.md.
round3: runs whose memory cannot fit (refused before anything is allocated) and `kvviz attach`
  against a hostile /metrics (tests/fuzz/hostile_http.py), each a child started by the bare
  launcher: its exit, its own peak RSS, and the time from SIGTERM (sent --seconds after its
  recording exists) to its exit, or from its start for a run that ends by itself. Targets:
  one error line and exit 2 for the refusals; exit within 1 s of SIGTERM. `--only export`,
  `--only events`: a long recording exported and verified (benchmarks/long_recording.py).
"""
from __future__ import annotations

import json
import pickle
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import floods as fl
import harness
import msgspec
import numpy as np

sys.path.insert(0, str(harness.ROOT / "tests"))  # pickles: tests/torchsnap/bombs.py

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


def event_payloads(events: int, batch: int, enc: str) -> list[bytes]:
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


def _subscribe(data: list[bytes], sent: int, tmp: Path, port: int,
               socket: bool) -> tuple[int, float, float]:
    """Events received after the clock started, their wall and CPU seconds."""
    from kvviz.node.kvevents.subscriber import Subscriber, SubscriberConfig
    from kvviz.store.writer import RunWriter

    w = RunWriter(tmp / f"b{port}.db", {"mode": "kv-events"})
    kv = w.kv_events()
    sub = Subscriber(SubscriberConfig((f"tcp://127.0.0.1:{port}",)), kv)
    st = sub.streams[0]
    pub = None
    if socket:
        pub = subprocess.Popen([sys.executable, "-c", _PUB, str(port), str(len(data))],
                               stdin=subprocess.PIPE)
        assert pub.stdin is not None
        for p in data:
            pub.stdin.write(b"%d\n" % len(p) + p)
        pub.stdin.close()
    deadline = time.monotonic() + 120
    while socket and st.batches == 0 and time.monotonic() < deadline:
        sub.poll(10, max_messages=1)
    first = st.events
    c0 = time.process_time()
    t0 = last = time.perf_counter()
    for i, p in enumerate(data if not socket else ()):
        sub.handle(st, [b"", i.to_bytes(8, "big"), p])
        if (now := time.perf_counter()) - last >= 0.5:
            kv.flush()
            w.commit()
            last = now
    while socket and st.batches < len(data) and time.monotonic() < deadline:
        sub.poll(10)
        if (now := time.perf_counter()) - last >= 0.5:
            kv.flush()
            w.commit()
            last = now
    kv.flush()
    w.commit()
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    if pub is not None:
        pub.wait(30)
    assert st.events == sent and st.undecodable == 0, f"received {st.events} of {sent} events"
    sub.close()
    w.close()
    return st.events - first, dt, cpu


def events(a, tmp: Path) -> None:
    for k, enc in enumerate(("map", "array")):
        data = event_payloads(a.events, a.batch, enc)
        mb = sum(map(len, data)) / 2**20
        for path in ("pipeline", "socket"):
            n, dt, cpu = _subscribe(data, a.events, tmp, a.port + 2 * k + (path == "socket"),
                                    path == "socket")
            harness.emit(a, {"bench": "kvevents", "path": path, "encoding": enc,
                             "events": a.events, "batch": a.batch, "payload_mb": round(mb, 1),
                             "events_per_s": round(n / dt), "events_per_cpu_s": round(n / cpu)},
                         f"{path:9s} {enc:6s} {a.events} events in batches of {a.batch} "
                         f"({mb:.1f} MiB): {n / dt:,.0f} events/s wall, {n / cpu:,.0f} per "
                         f"CPU-second")


def realistic_snapshot(segments: int, blocks: int = 200, frames: int = 20) -> bytes:
    """A snapshot shaped like a real one: blocks with stack frames (most of the bytes)."""
    segs, addr = [], 1 << 40
    for _ in range(segments):
        out, a = [], addr
        for j in range(blocks):
            out.append({"address": a, "size": 1 << 20, "requested_size": (1 << 20) - j,
                        "state": "active_allocated" if j % 2 else "inactive",
                        "frames": [{"filename": f"/site-packages/torch/nn/modules/m{k}.py",
                                    "line": 100 + k + j, "name": f"forward_{k}"}
                                   for k in range(frames)]})
            a += 1 << 20
        segs.append({"device": 0, "address": addr, "total_size": blocks << 20,
                     "segment_type": "large", "blocks": out, "frames": []})
        addr += 1 << 36
    return pickle.dumps({"segments": segs, "device_traces": [[]]}, protocol=4)


def pickles(a, tmp: Path) -> None:
    from torchsnap import bombs
    from torchsnap.snaps import make_snapshot

    from kvviz.core.sandbox import run_limited_outcome
    from kvviz.torchsnap.safe_pickle import DEFAULT_MAX_BYTES
    from kvviz.torchsnap.sandboxed import parse_file_plain, parse_limits

    todo = {"legit: small snapshot (tests/torchsnap/snaps.py)":
            lambda: pickle.dumps(make_snapshot(), protocol=4),
            "legit: 50 segments x 200 blocks x 20 frames": lambda: realistic_snapshot(50),
            "legit: 200 segments x 200 blocks x 20 frames (~ the upload limit)":
            lambda: realistic_snapshot(200)}
    todo.update({n: build for n, (build, _) in bombs.BOMBS.items()
                 if not (a.quick and n in bombs.SLOW)})
    control = "control: deep tuple key, plain pickle.loads in the sandbox"
    todo[control] = bombs.deep_tuple_dict_key
    rows = []
    for name, build in todo.items():
        if a.only not in name or (a.quick and name.startswith("legit: ") and "small" not in name):
            continue
        data, path = build(), tmp / "input.pickle"
        path.write_bytes(data)
        limits = parse_limits(len(data))
        if name == control:
            out = run_limited_outcome(pickle.loads, data, **limits)
        else:
            out = run_limited_outcome(parse_file_plain, str(path), DEFAULT_MAX_BYTES, **limits)
        verdict = "parsed" if out.error is None else str(out.error).replace(str(path), "FILE")
        row = {"bench": "pickles", "input": name, "bytes": len(data),
               "mem_limit_mb": limits["mem_mb"],
               "peak_rss_mb": round(out.peak_rss_bytes / 2**20, 1),
               "wall_s": round(out.wall_s, 2),
               "kind": "ok" if out.error is None else out.error.kind, "verdict": verdict}
        rows.append(row)
        if a.json:
            harness.emit(a, row)
    if not a.json:
        print("| input | file | child peak RSS (limit) | time to verdict | verdict |")
        print("|---|---:|---:|---:|---|")
        for r in rows:
            print(f"| {r['input']} | {r['bytes'] / 2**20:.2f} MiB | {r['peak_rss_mb']:.0f} MiB "
                  f"({r['mem_limit_mb']:.0f}) | {r['wall_s']:.2f} s | {r['verdict'][:110]} |")


def trace_files(d: Path, n: int) -> dict[str, Path]:
    rng = np.random.default_rng(0)
    p = rng.integers(1, 8000, n)
    o = rng.integers(0, 2000, n) + 1
    ticks = np.cumsum(rng.integers(0, 3_000_000, n)) + 1  # 100 ns ticks
    base = np.datetime64("2023-11-16T18:15:46", "s")
    stamps = np.datetime_as_string(base + (ticks // 10_000_000).astype("m8[s]"), unit="s")
    stamps, frac, t = np.char.replace(stamps, "T", " "), ticks % 10_000_000, ticks / 1e7
    out = {f: d / name for f, name in (("azure", "azure.csv"), ("burstgpt", "burstgpt.csv"),
                                       ("kvviz-csv", "kvviz.csv"),
                                       ("mooncake", "mooncake.jsonl"))}
    with out["azure"].open("w") as fh:
        fh.write("TIMESTAMP,ContextTokens,GeneratedTokens\n")
        fh.writelines(f"{s}.{f:07d},{a},{b}\n" for s, f, a, b in zip(stamps, frac, p, o))
    with out["burstgpt"].open("w") as fh:
        fh.write("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n")
        fh.writelines(f"{x:.3f},{'ChatGPT' if a % 3 else 'GPT-4'},{a},{b},{a + b},"
                      "Conversation log\n" for x, a, b in zip(t, p, o))
    with out["kvviz-csv"].open("w") as fh:
        fh.write("arrival_s,prompt_tokens,output_tokens,prefix_group\n")
        fh.writelines(f"{x!r},{a},{b},-1\n" for x, a, b in zip(t.tolist(), p, o))
    m = min(n, 200_000)  # JSON is slower; a smaller file is enough for its rate
    with out["mooncake"].open("w") as fh:
        fh.writelines(
            json.dumps({"timestamp": int(x * 1000), "input_length": int(a),
                        "output_length": int(b), "hash_ids": list(range(-(-int(a) // 512)))})
            + "\n" for x, a, b in zip(t[:m], p[:m], o[:m]))
    return out


def traces(a, tmp: Path) -> None:
    from kvviz.traces import read_trace

    for fmt, path in trace_files(tmp, a.rows).items():
        best = cpu = float("inf")
        for _ in range(a.repeats):
            t0, c0 = time.perf_counter(), time.process_time()
            _, info = read_trace(path)
            best = min(best, time.perf_counter() - t0)
            cpu = min(cpu, time.process_time() - c0)
        r = {"bench": "traces", "format": fmt, "rows": info.rows_read, "seconds": best,
             "rows_per_s": int(info.rows_read / best), "cpu_seconds": cpu,
             "rows_per_cpu_s": int(info.rows_read / max(cpu, 1e-9)),
             "mb": round(path.stat().st_size / 2**20, 1)}
        harness.emit(a, r, f"{fmt:<10} {r['rows']:>9} rows {r['mb']:>7} MB {best:>8.3f} s "
                           f"{r['rows_per_s']:>11,} rows/s {r['rows_per_cpu_s']:>11,} rows/CPU-s")


def main() -> None:
    ap = harness.parser(__doc__, repeats=3)
    ap.add_argument("case", choices=["events", "pickles", "traces", "floods", "round3"])
    ap.add_argument("--events", type=int, default=400_000, help="events: events sent")
    ap.add_argument("--batch", type=int, default=100, help="events: events per batch")
    ap.add_argument("--port", type=int, default=47557, help="events: first of 4 ports")
    ap.add_argument("--only", default="", help="pickles, floods: inputs whose name contains "
                    "this")
    ap.add_argument("--rows", type=int, default=1_000_000, help="traces: rows per file")
    ap.add_argument("--samples", type=int, default=1_000_000,
                    help="round3 --only export: sample rows of the recording exported")
    ap.add_argument("--engine-events", type=int, default=10_000_000,
                    help="round3 --only events: engine events of the recording exported")
    ap.add_argument("--seconds", type=float, default=None,
                    help="floods, round3: SIGTERM after this (default 10, round3 4)")
    a = ap.parse_args()
    if a.seconds is None:
        a.seconds = 4.0 if a.case == "round3" else 10.0
    if a.quick:
        a.events, a.rows, a.repeats, a.seconds = 4_000, 20_000, 1, 2.0
    with tempfile.TemporaryDirectory() as d:
        {"events": events, "pickles": pickles, "traces": traces,
         "floods": lambda a, tmp: fl.floods_table(a, tmp, harness.emit),
         "round3": lambda a, tmp: fl.round3_table(a, tmp, harness.emit)}[a.case](a, Path(d))


if __name__ == "__main__":
    main()
