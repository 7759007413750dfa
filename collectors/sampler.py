"""The store's writer thread: metrics, encoding and SQLite writes happen off the engine loop.

The engine thread only copies what it must (BlockMap snapshots, counters, new events) and
puts one Batch per sample on a small queue; this thread turns it into rows, commits the batch
as one transaction and then calls the hooks (e.g. a Prometheus exporter) with each record.
"""
from __future__ import annotations

import queue
import sys
import threading
from collections.abc import Callable
from typing import NamedTuple

from kvviz.blockmap import BlockMap
from kvviz.metrics import compute
from kvviz.store import RunWriter

Hook = Callable[[dict], None]


class LaneSample(NamedTuple):
    lane: str
    step: int
    counters: dict
    blockmap: BlockMap


class Batch(NamedTuple):
    t: float
    lanes: list[LaneSample]
    events: list  # kvviz.engine.Event, already in run time and run-wide sequence ids
    device: Callable[[], list[dict]] | None  # called here, off the engine thread


class SampleWriter:
    def __init__(self, writer: RunWriter, hooks: list[Hook] | None = None,
                 max_pending: int = 4, threaded: bool = True) -> None:
        self.writer = writer
        self.threaded = threaded
        self.hooks = hooks if hooks is not None else []
        self.error: BaseException | None = None
        self.samples_written = 0
        self._q: queue.Queue[Batch | None] = queue.Queue(max_pending)
        self._thread = threading.Thread(target=self._run, name="kvviz-store-writer", daemon=True)
        self._thread.start()

    def put(self, batch: Batch) -> None:
        """Blocks when the writer is `max_pending` batches behind (backpressure, not loss)."""
        if self.error is not None:
            raise RuntimeError(f"the store writer failed: {self.error}") from self.error
        if not self.threaded:
            for rec in self._write(batch):
                self._call_hooks(rec)
            return
        self._q.put(batch)

    def _run(self) -> None:
        while True:
            batch = self._q.get()
            if batch is None:
                return
            if self.error is not None:
                continue
            try:
                records = self._write(batch)
            except BaseException as exc:  # surfaced to the engine thread by put()/close()
                self.error = exc
                continue
            for rec in records:
                self._call_hooks(rec)

    def _write(self, b: Batch) -> list[dict]:
        w = self.writer
        records = []
        for s in b.lanes:
            rec = {**compute(s.blockmap).as_dict(), **s.counters}
            sid = w.add_sample(b.t, s.step, s.lane, rec, s.blockmap)
            records.append({"sample_id": sid, "t": b.t, "step": s.step, "lane": s.lane, **rec})
        w.add_events(b.events)
        for dev in (b.device() if b.device is not None else []):
            w.add_device_memory(b.t, dev)
        w.commit()
        self.samples_written += len(b.lanes)
        return records

    def _call_hooks(self, rec: dict) -> None:
        for hook in list(self.hooks):
            try:
                hook(rec)
            except Exception as exc:  # a broken exporter must not stop the recording
                print(f"kvviz collect: sample hook {hook!r} failed and was removed: {exc}",
                      file=sys.stderr)
                self.hooks.remove(hook)

    def close(self, status: str, message: str = "") -> None:
        """Drain the queue, write the final status, close the store."""
        self._q.put(None)
        self._thread.join()
        if self.error is not None and status != "error":
            status, message = "error", f"store writer failed: {self.error}"
        self.writer.close(status, message)
