"""The store's writer process: block-map encoding and SQLite writes, off the engine's GIL.

`collectors.sampler.SampleWriter` (the engine side) starts `main` in a spawned process. That
process opens the RunWriter itself (the SQLite connection lives here), reports "ready" or the
error, then writes one batch per message and commits it as one transaction. On a close
message it writes the final status and exits; when the pipe ends without one (the collector
was killed), it commits what it has and closes the run as "error" / "collector process died".

Wire format (our own processes, trusted): each message is one pickle (protocol 5), sent with
`send_bytes` behind a 4-byte count of its out-of-band buffers (the BlockMap arrays), which
follow with one `send_bytes` each: the arrays are never copied into a pickle on the engine
side.

    parent -> child  ("batch", t, lanes, events, devices, has_metrics)
                     lanes: [(step, lane, rec, bm)], events: kvviz.engine.events.EventColumns
                     ("close", status, message)
    child -> parent  ("ready", next sample id) | ("ack", samples_written)
                     ("error", exception type, message) | ("closed", samples_written, error)

`write_batch` is also what the in-process (thread / inline) modes of SampleWriter call.
"""
from __future__ import annotations

import importlib.util
import os
import pickle
import signal
import sys
from pathlib import Path
from typing import NamedTuple

DIED = "collector process died"
# The writer process and the engine-side sender thread run at this much lower priority (nice
# value added; Linux: per thread): on a small machine they would otherwise take a core from
# the engine loop whenever they run at once (CFS weight 1024 at nice 0 against 110 at +10).
# Neither needs much CPU (a few ms per sample) and backpressure bounds how far they lag.
# KVVIZ_WRITER_NICE overrides it (0: the engine's priority; benchmarks compare the two).
WRITER_NICE = 10


def writer_nice() -> int:
    raw = os.environ.get("KVVIZ_WRITER_NICE", "").strip()
    if not raw:
        return WRITER_NICE
    try:
        return max(0, min(19, int(raw)))
    except ValueError:
        raise ValueError(f"KVVIZ_WRITER_NICE: expected an integer 0..19, got {raw!r}") from None


def lower_priority(n: int) -> None:
    """Add `n` to the calling thread's nice value (best effort: never fails)."""
    if n <= 0 or not hasattr(os, "setpriority"):
        return
    try:
        tid = 0  # Linux: PRIO_PROCESS with 0 is the calling thread
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + n))
    except OSError:
        pass


class StoreSpec(NamedTuple):
    """What the writer process needs to open the RunWriter itself."""
    path: Path
    meta: dict
    overwrite: bool = False
    blockmap_budget_bytes: int = 200 * 2**20

    def open(self):
        from kvviz.store import RunWriter

        return RunWriter(self.path, self.meta, overwrite=self.overwrite,
                         blockmap_budget_bytes=self.blockmap_budget_bytes)


def write_batch(w, t: float, lanes: list, events: list, devices: list[dict],
                has_metrics: bool = True) -> int:
    """One sample batch -> rows, committed as one transaction. Returns the samples written.
    `lanes`: (step, lane, rec, blockmap); rec holds sample_id, counters and, when
    `has_metrics`, the block map's metrics (else they are computed here)."""
    for step, lane, rec, bm in lanes:
        if not has_metrics:
            from kvviz.metrics import compute

            sid, *rest = rec.items()
            rec = dict([sid, *compute(bm).as_dict().items(), *rest])
        w.add_sample(t, step, lane, rec, bm)
    w.add_events(events)
    for dev in devices:
        w.add_device_memory(t, dev)
    w.commit()
    return len(lanes)


def pack(msg: tuple) -> tuple[bytes, list]:
    """(header bytes, buffers) for `send`; pickling errors surface here, in the caller."""
    bufs: list = []
    data = pickle.dumps(msg, protocol=5, buffer_callback=bufs.append)
    return len(bufs).to_bytes(4, "little") + data, [b.raw() for b in bufs]


def send(conn, head: bytes, bufs: list) -> None:
    conn.send_bytes(head)
    for buf in bufs:
        conn.send_bytes(buf)


def recv(conn) -> tuple:
    """One message; raises EOFError when the other end is gone (also mid-message)."""
    head = conn.recv_bytes()
    bufs = [conn.recv_bytes() for _ in range(int.from_bytes(head[:4], "little"))]
    return pickle.loads(memoryview(head)[4:], buffers=bufs)


def _skip_pandas() -> None:
    """kvviz.store imports pandas for its reader only; this process never reads. A lazy module
    (stdlib LazyLoader) keeps ~0.4 s of imports off the collector's start."""
    if "pandas" in sys.modules:
        return
    spec = importlib.util.find_spec("pandas")
    if spec is None or spec.loader is None:
        return
    loader = importlib.util.LazyLoader(spec.loader)
    spec.loader = loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["pandas"] = mod
    loader.exec_module(mod)


def _error(exc: BaseException) -> tuple[str, str]:
    return type(exc).__name__, str(exc) or type(exc).__name__


def main(spec: StoreSpec, rx, tx, nice: int = 0) -> None:
    """Entry point of the writer process: rx receives batches, tx reports back; `nice` is
    added to its nice value (writer_nice(), read by the parent)."""
    # Ctrl-C and `kill` of a process group reach this process too: the collector decides
    # when the run ends (close message), or its death does (end of the pipe).
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    lower_priority(nice)
    _skip_pandas()
    try:
        w = spec.open()
    except BaseException as exc:
        tx.send(("error", *_error(exc)))
        return
    tx.send(("ready", 1 + int(w.conn.execute(
        "SELECT COALESCE(MAX(sample_id), 0) FROM samples").fetchone()[0])))
    written, failed = 0, None
    while True:
        try:
            msg = recv(rx)
        except (EOFError, OSError):  # the collector died: keep what it sent, say so
            try:
                w.close("error", DIED if failed is None else f"{DIED}; store writer failed: "
                        f"{failed}")
            except BaseException:
                pass
            return
        if msg[0] == "close":
            status, message = msg[1], msg[2]
            if failed is not None and status != "error":
                status, message = "error", f"store writer failed: {failed}"
            err = None
            try:
                w.close(status, message)
            except BaseException as exc:
                err = _error(exc)[1]
            _reply(tx, ("closed", written, err))
            return
        if failed is not None:
            continue  # drain until the collector closes (it raises on its next put)
        try:
            written += write_batch(w, *msg[1:])
        except BaseException as exc:
            failed = _error(exc)[1]
            _reply(tx, ("error", *_error(exc)))
            continue
        _reply(tx, ("ack", written))


def _reply(tx, msg: tuple) -> None:
    try:
        tx.send(msg)
    except OSError:
        pass  # the collector is gone; the next recv ends this process
