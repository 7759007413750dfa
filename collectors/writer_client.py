"""The engine side of the store writer: the heavy work runs in a separate process.

The engine thread copies what it must (BlockMap snapshots, counters, new events) into one
Batch per sample and calls `SampleWriter.put`, which assigns the sample ids and hands the
batch to the writer process (collectors/writer_process.py); that process encodes the block
maps and inserts and commits the batch as one SQLite transaction. When hooks are registered
(Prometheus exporter, torch snapshots) put() also computes each lane's metrics
(`kvviz.core.metrics.compute`, milliseconds on a 256k-block map) so the records are complete,
and calls the hooks on the engine thread right after the hand-off, not after the commit: a
hook may see a sample a few ms before it is committed (or, if the store then fails, one that
never is). Without hooks the writer process computes the metrics.

Why a process: a writer *thread* runs a few hundred short numpy / zlib / SQLite calls per
sample, each releasing and re-taking the GIL, and the engine loop (many tiny numpy calls) then
waits up to the 5 ms switch interval at every hand-off (a GIL convoy; docs/BENCHMARKS.md,
decision log). The process has its own GIL; the engine thread only pickles the batch
structure (the arrays go out of band) and a small sender thread writes the message to the
pipe with one `writev`, blocked in that system call without the GIL (writer_process: wire
format).

Modes: "process" (the collector; takes a StoreSpec and opens the RunWriter in the child),
"thread" (a writer thread in this process) and "inline" (everything in put(); tests and
benchmarks). All three share `writer_process.write_batch`.
"""
from __future__ import annotations

import atexit
import multiprocessing
import os
import queue
import sys
import threading
import time
from collections.abc import Callable

from collectors import writer_process
from collectors.sample import Batch
from collectors.writer_process import StoreSpec, write_batch
from kvviz.core.errors import StoreError
from kvviz.core.metrics import compute
from kvviz.store.writer import RunWriter

Hook = Callable[[dict], None]
MODES = ("process", "thread", "inline")
READY_TIMEOUT_S = 60.0  # the writer process imports numpy + sqlite and writes the header
__all__ = ["Hook", "SampleWriter", "StoreSpec"]

class WriterFailed(StoreError, RuntimeError):
    """The store writer failed or died: the CLI shows it as one error line (a StoreError)."""


class SampleWriter:
    """put(batch) per sample, close(status, message) once. put() blocks when the writer is
    about `max_pending` batches behind (backpressure, not loss) and raises once the writer has
    failed; close() then records the run as "error" and raises if even that fails."""

    def __init__(self, store: RunWriter | StoreSpec, hooks: list[Hook] | None = None,
                 max_pending: int = 4, mode: str | None = None) -> None:
        mode = mode or ("process" if isinstance(store, StoreSpec) else "thread")
        if mode == "process" and not hasattr(os, "writev"):  # not POSIX: no vectored pipe I/O
            mode = "thread"
        if mode not in MODES:
            raise ValueError(f"mode: must be one of {list(MODES)}, got {mode!r}")
        if mode == "process" and not isinstance(store, StoreSpec):
            raise TypeError("process mode takes a StoreSpec: the writer process opens the "
                            "RunWriter itself")
        self.mode = mode
        self.hooks = hooks if hooks is not None else []
        self.error: str | None = None
        self.samples_written = 0
        self._put = 0  # lane samples handed over
        self._closed = False
        if mode == "process":
            self.writer: RunWriter | None = None
            self._q: queue.Queue = queue.Queue(max_pending)
            self._next_sid = self._start(store)  # type: ignore[arg-type]
            self._thread = threading.Thread(target=self._send_loop, daemon=True,
                                            name="kvviz-store-sender")
        else:
            self.writer = store.open() if isinstance(store, StoreSpec) else store
            self._next_sid = 1 + int(self.writer.conn.execute(
                "SELECT COALESCE(MAX(sample_id), 0) FROM samples").fetchone()[0])
            self._q = queue.Queue(max_pending)
            self._thread = threading.Thread(target=self._write_loop, daemon=True,
                                            name="kvviz-store-writer")
        if mode != "inline":
            self._thread.start()

    # ---- the writer process -----------------------------------------------------------------
    def _start(self, spec: StoreSpec) -> int:
        """Start the writer process; return once it has created the file (its first sample
        id), or raise what it raised (StoreError for an unwritable --out) with no file left."""
        self._path = spec.path
        self._nice = writer_process.writer_nice()  # a bad KVVIZ_WRITER_NICE: ValueError here
        ctx = multiprocessing.get_context("spawn")  # never fork a process with threads / CUDA
        data_r, self._data = ctx.Pipe(duplex=False)
        writer_process.widen(self._data)
        self._back, back_w = ctx.Pipe(duplex=False)
        self._proc = ctx.Process(target=writer_process.child,
                                 args=(spec, data_r, back_w, self._nice),
                                 name="kvviz-store-writer", daemon=True)
        self._proc.start()
        data_r.close()  # the child's ends: its death is our EOF, ours is its
        back_w.close()
        # If this process exits without close() (an uncaught error), multiprocessing's own
        # exit handler joins the child: end its input first so it closes the run and exits.
        atexit.register(self._at_exit)
        msg = self._recv(READY_TIMEOUT_S, starting=True)
        if msg[0] == "ready":
            return int(msg[1])
        self._proc.join(5)
        self._release()
        if msg[0] == "error" and msg[1] in ("ValueError", "TypeError"):
            raise ValueError(msg[2])
        raise StoreError(msg[-1])

    def _recv(self, timeout: float | None, starting: bool = False) -> tuple:
        """The next message from the writer process, or ("gone", why) when it has exited
        (or did not answer within `timeout`)."""
        end = None if timeout is None else time.monotonic() + timeout
        while not self._back.poll(0.05):
            if not self._proc.is_alive() and not self._back.poll(0):
                break
            if end is not None and time.monotonic() > end:
                self._proc.kill()
                return ("gone", f"{self._what()}: the store writer process did not answer "
                        f"within {timeout:.0f} s")
        try:
            return self._back.recv()
        except (EOFError, OSError):
            self._proc.join(5)
            verb = "failed to start" if starting else "exited unexpectedly"
            return ("gone", f"{self._what()}: the store writer process {verb} (exit code "
                    f"{self._proc.exitcode})")

    def _what(self) -> str:
        return str(getattr(self, "_path", "store"))

    def _poll(self) -> None:
        """Take the writer process's acks and errors without waiting."""
        while self.error is None and (self._back.poll(0) or not self._proc.is_alive()):
            msg = self._recv(0)
            if msg[0] == "ack":
                self.samples_written = msg[1]
            elif msg[0] in ("error", "gone"):
                self.error = msg[-1]

    def _send_loop(self) -> None:
        """Writes each message to the pipe: blocks (without the GIL) while the child is busy.
        The first at the engine's priority (as the writer process writes it), then lower."""
        broken, nice = False, self._nice
        while True:
            item = self._q.get()
            if item is None:
                return
            if broken:
                continue  # the close message too: close() then sees the process gone
            try:
                writer_process.send(self._data, *item)
            except OSError as exc:
                broken = True
                self.error = self.error or f"the store writer process is gone ({exc})"
            if nice:
                writer_process.lower_priority(nice)
                nice = 0

    def _at_exit(self) -> None:
        """Exiting without close(): send what is queued, then end the pipe; the writer
        process commits it and closes the run as "error" (collector process died)."""
        thread = getattr(self, "_thread", None)
        if thread is not None and thread.is_alive():
            try:
                self._q.put(None, timeout=5)
            except queue.Full:
                pass
            thread.join(5)
        self._data.close()

    def _release(self) -> None:
        atexit.unregister(self._at_exit)
        self._data.close()
        self._back.close()

    # ---- the in-process modes ---------------------------------------------------------------
    def _write_loop(self) -> None:
        while True:
            item = self._q.get()
            if item is None:
                return
            if self.error is not None:
                continue
            try:
                n = write_batch(self.writer, *item)
            except BaseException as exc:  # surfaced to the engine thread by put()/close()
                self.error = str(exc) or type(exc).__name__
                continue
            self.samples_written += n

    # ---- the engine side --------------------------------------------------------------------
    def put(self, batch: Batch) -> None:
        """Hands the batch to the writer, then calls the hooks here with each lane's record
        (sample_id, t, step, lane, metrics, counters)."""
        if self._closed:
            raise RuntimeError("the store writer is closed")
        if self.mode == "process":
            self._poll()
        if self.error is not None:
            raise WriterFailed(f"the store writer failed: {self.error}")
        # The metrics are computed here only when a hook needs the record; else the writer
        # computes them (the same function), off the engine thread.
        here = bool(self.hooks)
        records, lanes = [], []
        for i, s in enumerate(batch.lanes):
            rec = {"sample_id": self._next_sid + i,
                   **(compute(s.blockmap).as_dict() if here else {}), **s.counters}
            lanes.append((s.step, s.lane, rec, s.blockmap))
            if here:
                records.append({"t": batch.t, "step": s.step, "lane": s.lane, **rec})
        devices = batch.device() if batch.device is not None else []
        item = (float(batch.t), lanes, batch.events, devices, here, batch.kv)
        if self.mode == "process":
            self._q.put(writer_process.pack(("batch", *item)))
        elif self.mode == "thread":
            self._q.put(item)
        else:
            try:
                self.samples_written += write_batch(self.writer, *item)
            except BaseException as exc:
                self.error = str(exc) or type(exc).__name__
                raise WriterFailed(f"the store writer failed: {self.error}") from exc
        self._next_sid += len(lanes)
        self._put += len(lanes)
        for rec in records:
            self._call_hooks(rec)

    def _call_hooks(self, rec: dict) -> None:
        for hook in list(self.hooks):
            try:
                hook(rec)
            except Exception as exc:  # a broken exporter must not stop the recording
                print(f"kvviz collect: sample hook {hook!r} failed and was removed: {exc}",
                      file=sys.stderr)
                self.hooks.remove(hook)

    def sync(self, timeout: float = 30.0) -> None:
        """Wait until every sample put so far is committed; raises if the writer failed."""
        end = time.monotonic() + timeout
        while self.samples_written < self._put and self.error is None:
            if time.monotonic() > end:
                raise TimeoutError(f"the store writer is {self._put - self.samples_written} "
                                   f"samples behind after {timeout} s")
            if self.mode == "process":
                self._back.poll(0.05)
                self._poll()
            else:
                time.sleep(0.01)
        if self.error is not None:
            raise WriterFailed(f"the store writer failed: {self.error}")

    def close(self, status: str, message: str = "") -> None:
        """Drain what is pending, write the final status, close the store (and its process)."""
        if self._closed:
            return
        self._closed = True
        if self.mode == "process":
            self._close_process(status, message)
            return
        if self.mode == "thread":
            self._q.put(None)
            self._thread.join()
        if self.error is not None and status != "error":
            status, message = "error", f"store writer failed: {self.error}"
        assert self.writer is not None
        self.writer.close(status, message)

    def _close_process(self, status: str, message: str) -> None:
        self._q.put(writer_process.pack(("close", status, message)))
        self._q.put(None)
        self._thread.join()
        err = None
        try:
            while True:
                msg = self._recv(None)
                if msg[0] == "ack":
                    self.samples_written = msg[1]
                elif msg[0] == "closed":
                    self.samples_written, err = msg[1], msg[2]
                    break
                elif msg[0] == "error":
                    self.error = self.error or msg[2]
                elif msg[0] == "gone":  # exited without closing: the run still says "running"
                    self.error = self.error or msg[1]
                    err = msg[1]
                    break
        finally:
            self._proc.join(10)
            if self._proc.is_alive():
                self._proc.kill()
                self._proc.join()
            self._release()
        if err is None:
            return
        why = message if status == "error" and message else f"store writer failed: {err}"
        if not writer_process.close_orphaned(self._path, why):
            raise WriterFailed(f"the store writer failed to close the run: {err}")
