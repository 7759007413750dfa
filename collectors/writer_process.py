"""The store's writer process: block-map encoding and SQLite writes, off the engine's GIL.

`collectors.writer_client.SampleWriter` (the engine side) starts `main` in a spawned process. That
process opens the RunWriter itself (the SQLite connection lives here), reports "ready" or the
error, then writes one batch per message and commits it as one transaction. On a close
message it writes the final status and exits; when the pipe ends without one (the collector
was killed), it commits what it has and closes the run as "error" / "collector process died".

Wire format, parent -> child (our own processes, trusted): each message is one pickle
(protocol 5) whose large arrays (BlockMap arrays, event columns) travel out of band, framed
as `<II` (pickle length, buffer count), `<Q` per buffer length, the pickle, the buffers. The
engine side writes a whole message with one `os.writev` (one release of the GIL, where a
`send_bytes` per buffer would re-take it ~30 times a sample, each time making the engine
thread hand it over), through a pipe enlarged to 1 MiB where Linux allows (~4 wake-ups of the
child per 3.9 MB sample instead of ~60 through the default 64 KiB). The arrays are never
copied into a pickle. Child -> parent
messages are small and use `Connection.send`.

    parent -> child  ("batch", t, lanes, events, devices, has_metrics)
                     lanes: [(step, lane, rec, bm)], events: kvviz.engine.eventlog.EventColumns
                     ("close", status, message)
    child -> parent  ("ready", next sample id) | ("ack", samples_written)
                     ("error", exception type, message) | ("closed", samples_written, error)

`write_batch` is also what the in-process (thread / inline) modes of SampleWriter call.
"""
from __future__ import annotations

import os
import pickle
import signal
import struct
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
        from kvviz.store.writer import RunWriter

        return RunWriter(self.path, self.meta, overwrite=self.overwrite,
                         blockmap_budget_bytes=self.blockmap_budget_bytes)


def write_batch(w, t: float, lanes: list, events: list, devices: list[dict],
                has_metrics: bool = True, kv: list = ()) -> int:
    """One sample batch -> rows, committed as one transaction. Returns the samples written.
    `lanes`: (step, lane, rec, blockmap); rec holds sample_id, counters and, when
    `has_metrics`, the block map's metrics (else they are computed here). `kv`: the
    collector's own published KV-event batches (RunWriter.add_own_kv_batches)."""
    for step, lane, rec, bm in lanes:
        if not has_metrics:
            from kvviz.core.metrics import compute

            sid, *rest = rec.items()
            rec = dict([sid, *compute(bm).as_dict().items(), *rest])
        w.add_sample(t, step, lane, rec, bm)
    w.add_events(events)
    for dev in devices:
        w.add_device_memory(t, dev)
    if kv:
        w.add_own_kv_batches(t, kv)
    w.commit()
    return len(lanes)


def pack(msg: tuple) -> tuple[bytes, list]:
    """(frame header + pickle, buffers) for `send`; pickling errors surface here, in the
    caller (the engine thread), not in the sender thread."""
    bufs: list = []
    data = pickle.dumps(msg, protocol=5, buffer_callback=bufs.append)
    views = [b.raw() for b in bufs]
    head = struct.pack(f"<II{len(views)}Q", len(data), len(views), *(v.nbytes for v in views))
    return head + data, views


IOV_MAX = 1024  # Linux's limit on the parts of one writev


def send(conn, head: bytes, bufs: list) -> None:
    """Write one packed message to the pipe, blocking (without the GIL) until it is all in."""
    fd = conn.fileno()
    parts = [memoryview(head), *(b for b in bufs if b.nbytes)]
    while parts:
        n = os.writev(fd, parts[:IOV_MAX])
        while parts and n >= parts[0].nbytes:
            n -= parts[0].nbytes
            parts.pop(0)
        if n:
            parts[0] = parts[0][n:]


def _read_exact(fd: int, n: int, started: bool) -> bytearray:
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = os.readv(fd, [view[got:]])
        if k == 0:
            raise EOFError("the collector's pipe ended" + (" mid-message" if started or got
                                                            else ""))
        got += k
    return buf


def recv(conn) -> tuple:
    """One message; raises EOFError when the other end is gone (also mid-message)."""
    fd = conn.fileno()
    size, count = struct.unpack("<II", _read_exact(fd, 8, False))
    sizes = struct.unpack(f"<{count}Q", _read_exact(fd, 8 * count, True)) if count else ()
    data = _read_exact(fd, size, True)
    return pickle.loads(data, buffers=[_read_exact(fd, k, True) for k in sizes])


PIPE_BYTES = 1 << 20


def widen(conn) -> None:
    """Best effort: a 1 MiB pipe buffer (Linux F_SETPIPE_SZ; the unprivileged maximum by
    default). Without it a sample still goes through, in 64 KiB steps."""
    try:
        import fcntl
        fcntl.fcntl(conn.fileno(), fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    except (ImportError, AttributeError, OSError):
        pass


def close_orphaned(path: Path, message: str) -> bool:
    """Close a run whose writer process died (SIGKILL, OOM) as "error" with `message`, from
    the collector; only while the file still says "running". False if even that fails."""
    import sqlite3
    import time

    try:
        conn = sqlite3.connect(path, timeout=5, isolation_level=None)
        try:
            conn.execute("UPDATE run SET status = 'error', status_message = ?, "
                         "heartbeat_unix = ? WHERE id = 1 AND status = 'running'",
                         (message, time.time()))
            try:  # back to one self-contained file, as RunWriter.close leaves it
                conn.execute("PRAGMA journal_mode=DELETE")
            except sqlite3.OperationalError:
                pass  # a reader has it open: the WAL stays until the next writer
        finally:
            conn.close()
    except sqlite3.Error:
        return False
    return True


def _error(exc: BaseException) -> tuple[str, str]:
    return type(exc).__name__, str(exc) or type(exc).__name__


def main(spec: StoreSpec, rx, tx, nice: int = 0) -> None:
    """Entry point of the writer process: rx receives batches, tx reports back; `nice` is
    added to its nice value (writer_nice(), read by the parent) once the run's file and
    first batch are written: on a loaded machine a new run shows up without waiting for
    spare CPU, and the rest of it yields to the engine."""
    # Ctrl-C and `kill` of a process group reach this process too: the collector decides
    # when the run ends (close message), or its death does (end of the pipe).
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
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
        if nice:  # the file and the first sample at the engine's priority, then yield
            lower_priority(nice)
            nice = 0


def child(spec: StoreSpec, rx, tx, nice: int = 0) -> None:
    """The writer process's target: main(), then exit at once. Everything it wrote is
    committed and the file closed by then, so the interpreter's teardown (module and object
    cleanup) has nothing to save: at nice +10 on a loaded machine it took over 10 s of wall
    time, which the collector's stop then waited for (seen: SIGTERM to exit 12 s with 4 busy
    loops on 2 cores; 1.2 s without them)."""
    main(spec, rx, tx, nice)
    sys.stderr.flush()
    os._exit(0)


def _reply(tx, msg: tuple) -> None:
    try:
        tx.send(msg)
    except OSError:
        pass  # the collector is gone; the next recv ends this process
