"""Open a trace (a regular file or bytes), detect its format, stream it into a Workload."""
from __future__ import annotations

import io
import os
import stat
from pathlib import Path
from typing import BinaryIO

import numpy as np

from kvviz.core import safeio
from kvviz.core.errors import TraceError
from kvviz.core.workload import Workload, clip_workload
from kvviz.traces.chunks import Progress, split_first_line, text_chunks
from kvviz.traces.csvfmt import CsvReader, CsvSpec
from kvviz.traces.formats import SPECS, detect
from kvviz.traces.options import TraceInfo, TraceOptions
from kvviz.traces.rows import Sink


def read_trace(path: str | Path, opts: TraceOptions | None = None, *, prefix_tokens: int = 256,
               progress: Progress | None = None) -> tuple[Workload, TraceInfo]:
    """Read a trace file. Raises TraceError naming the file (and line, column) on bad input."""
    path = Path(path)
    name = safeio.printable(str(path))
    try:  # a FIFO or device would block or never end: refused by kind, before opening
        safeio.check_input_file(path, "trace")
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except safeio.PathError as exc:
        raise TraceError(str(exc)) from None
    except OSError as exc:
        raise TraceError(f"{name}: cannot open ({exc.strerror})") from None
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # swapped since the check
            raise TraceError(f"{name}: not a regular file")
        try:
            return _read(fh, name, opts or TraceOptions(), prefix_tokens, progress)
        except OSError as exc:  # e.g. /proc/self/mem: a "regular" file that cannot be read
            raise TraceError(f"{name}: cannot read ({exc.strerror or exc})") from None


def read_trace_bytes(data: bytes, name: str = "upload", opts: TraceOptions | None = None, *,
                     prefix_tokens: int = 256) -> tuple[Workload, TraceInfo]:
    """Read a trace held in memory (an upload). Same checks as read_trace."""
    return _read(io.BytesIO(data), name, opts or TraceOptions(), prefix_tokens, None)


def _read(fh: BinaryIO, name: str, opts: TraceOptions, prefix_tokens: int,
          progress: Progress | None) -> tuple[Workload, TraceInfo]:
    chunks = text_chunks(fh, name, progress)
    pending: list[tuple[int, str]] = []
    fmt = opts.fmt
    for line_no, text in chunks:
        pending.append((line_no, text))
        head, at, _ = split_first_line(line_no, text)
        if head:
            fmt = fmt or detect(head, name, at)
            break
    if fmt is None:
        raise TraceError(f"{name}: empty file (no requests)")
    spec = SPECS[fmt]
    sink = Sink(name, spec.checks, opts)
    both = _chain(pending, chunks)
    if isinstance(spec, CsvSpec):
        CsvReader(spec, sink, name).read(both)
    else:
        from kvviz.traces.jsonl import JsonReader

        JsonReader(spec, sink, name).read(both)
    if not sink.kept:
        raise TraceError(f"{name}: no requests kept ({sink.rows_read} rows read, {sink.bad} bad, "
                         f"{sink.failed} failed, {sink.filtered} other models, {sink.outside} "
                         "outside the time window)")
    return _workload(sink, spec, opts, prefix_tokens, fmt, name)


def _chain(first, rest):
    yield from first
    yield from rest


def _workload(sink: Sink, spec, opts: TraceOptions, prefix_tokens: int, fmt: str,
              name: str) -> tuple[Workload, TraceInfo]:
    t, prompt, output, group = sink.columns()
    ptr = ids = None
    block = sink.chain_block
    if block and sink.chain_lens:
        ptr = np.concatenate([[0], np.cumsum(np.concatenate(sink.chain_lens))]).astype(np.int64)
        ids = np.concatenate(sink.chain_ids).astype(np.int64)
    if not spec.relative:  # kvviz traces may list requests in any order
        order = np.argsort(t, kind="stable")
        t, prompt, output, group = t[order], prompt[order], output[order], group[order]
        if ptr is not None:
            lens = np.diff(ptr)[order]
            starts = ptr[:-1][order]
            ids = ids[np.repeat(starts - np.cumsum(lens) + lens, lens) + np.arange(lens.sum())]
            ptr = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    span = float(t[-1] - t[0]) if t.size else 0.0
    arrival = (t - opts.start_s) / opts.time_scale  # kept rows have t >= start_s
    shared = bool((group >= 0).any())
    w = Workload(arrival, prompt, output, group, prefix_tokens if shared else 0,
                 chain_ptr=ptr, chain_ids=ids, chain_block=block if ptr is not None else 0)
    info = TraceInfo(name, fmt, sink.rows_read, sink.kept, sink.bad, sink.failed, sink.filtered,
                     sink.outside, span, w.chain_block)
    return w, info


def parse_trace(text: str, name: str = "trace", *, max_seq_len: int | None = 2048,
                prefix_tokens: int = 256) -> Workload:
    """Parse a trace of any known format held in a string; clip to max_seq_len (None: no clip).
    Errors name the file, the line and the column."""
    w, _ = read_trace_bytes(text.encode("utf-8"), name, prefix_tokens=prefix_tokens)
    return w if max_seq_len is None else clip_workload(w, max_seq_len)


def load_trace(path: str | Path, *, max_seq_len: int | None = 2048,
               prefix_tokens: int = 256) -> Workload:
    """read_trace's workload alone, clipped to max_seq_len (None: no clip)."""
    w, _ = read_trace(path, prefix_tokens=prefix_tokens)
    return w if max_seq_len is None else clip_workload(w, max_seq_len)
