"""Uploaded traces parsed in a resource-limited child (kvviz/core/sandbox.py): a trace built to
exhaust memory or time costs the child, never the dashboard. The child returns plain data
(numpy arrays and numbers, no pickle); the parent rebuilds the Workload and TraceInfo."""
from __future__ import annotations

import dataclasses

from kvviz.core.errors import TraceError
from kvviz.core.sandbox import SandboxError, run_limited
from kvviz.core.workload import Workload
from kvviz.traces import read_trace_bytes
from kvviz.traces.options import TraceInfo, TraceOptions

MEM_MB = 1536  # a 50 MB upload of 1M rows needs a few hundred MB of numpy columns
WALL_S = 60.0


def parse_plain(data: bytes, name: str, skip_bad_rows: bool) -> dict:
    """In the child: the parsed trace as plain data."""
    w, info = read_trace_bytes(data, name, TraceOptions(skip_bad_rows=skip_bad_rows))
    return {"workload": {f.name: getattr(w, f.name) for f in dataclasses.fields(w)},
            "info": info.summary()}


def parse_upload_sandboxed(name: str, data: bytes,
                           opts: TraceOptions) -> tuple[Workload, TraceInfo]:
    """Parse uploaded bytes in the child; the parser's TraceError message, or a SandboxError
    (memory, time, crash), names what failed."""
    try:
        out = run_limited(parse_plain, data, name, opts.skip_bad_rows, mem_mb=MEM_MB,
                          cpu_s=WALL_S, wall_s=WALL_S, label=name)
    except SandboxError as exc:
        if exc.error_type == "TraceError":  # the parser's own verdict on the bytes
            raise TraceError(str(exc)) from None
        raise
    w = Workload(**out["workload"])
    return w, TraceInfo(**out["info"])
