"""Trace flags shared by `kvviz simulate` and `kvviz collect`, and how a run reports a trace."""
from __future__ import annotations

import argparse
import sys

from kvviz.core.workload import Workload
from kvviz.traces import FORMATS, TraceInfo, TraceOptions, read_trace
from kvviz.traces.overview import prefix_reuse_share

DEFAULT_MAX_SEQ_LEN = 2048  # synthetic workloads; a trace defaults to its longest request


def add_trace_arguments(g) -> None:
    g.add_argument("--trace-format", choices=FORMATS, default=None,
                   help="force the trace format (default: detected from the header)")
    g.add_argument("--limit", type=int, default=None, metavar="N",
                   help="keep the first N requests of the trace")
    g.add_argument("--start-s", type=float, default=0.0, metavar="S",
                   help="skip the trace's first S seconds (arrivals then start at 0)")
    g.add_argument("--duration-s", type=float, default=None, metavar="S",
                   help="keep S seconds of the trace from --start-s")
    g.add_argument("--time-scale", type=float, default=1.0, metavar="F",
                   help="replay F times faster (0.5 = half speed) (default 1)")
    g.add_argument("--skip-bad-rows", action="store_true",
                   help="skip and count unusable rows instead of stopping at the first")
    g.add_argument("--model-filter", default=None, metavar="NAME",
                   help="BurstGPT: keep only requests to this Model (e.g. ChatGPT)")


def trace_options(a: argparse.Namespace) -> TraceOptions:
    try:
        return TraceOptions(fmt=a.trace_format, limit=a.limit, start_s=a.start_s,
                            duration_s=a.duration_s, time_scale=a.time_scale,
                            skip_bad_rows=a.skip_bad_rows, model_filter=a.model_filter)
    except ValueError as exc:  # "field: why" -> "--flag: why"
        field, _, why = str(exc).partition(": ")
        flag = "--trace-format" if field == "fmt" else "--" + field.replace("_", "-")
        raise ValueError(f"{flag}: {why}") from None


def load_trace_args(a: argparse.Namespace, prefix_tokens: int, show_progress: bool
                    ) -> tuple[Workload, TraceInfo]:
    """Read --trace with the trace flags; a progress bar on stderr when it is a terminal."""
    import os

    total = max(1, os.path.getsize(a.trace)) if os.path.isfile(a.trace) else 1
    show = show_progress and sys.stderr.isatty()

    def progress(done: int) -> None:
        bar = "#" * int(30 * min(done, total) / total)
        print(f"\r[{bar:<30}] reading {a.trace}: {done / 2**20:.0f} / {total / 2**20:.0f} MB",
              end="", file=sys.stderr, flush=True)

    w, info = read_trace(a.trace, trace_options(a), prefix_tokens=prefix_tokens,
                         progress=progress if show else None)
    if show:
        print(file=sys.stderr)
    return w, info


def resolve_max_seq_len(given: int | None, w: Workload | None) -> int:
    """--max-seq-len as given; else a trace's longest prompt+output (nothing clipped)."""
    if given is not None:
        return given
    if w is None:
        return DEFAULT_MAX_SEQ_LEN
    return max(2, int(w.final_len.max()))


def trace_fields(info: TraceInfo | None, w: Workload) -> dict:
    """What --json reports about the request stream: clipped and skipped counts."""
    out = {"clipped_requests": int(w.clipped)}
    if info is not None:
        out.update(trace_format=info.fmt, trace_rows_read=info.rows_read,
                   skipped_bad_rows=info.bad_rows, skipped_failed_rows=info.failed_rows,
                   skipped_other_model_rows=info.filtered_rows,
                   skipped_outside_window_rows=info.outside_rows)
    return out


def trace_line(info: TraceInfo, w: Workload, max_seq_len: int) -> str:
    share = prefix_reuse_share(w)
    return (f"trace {info.name} ({info.fmt}): {info.rows_read} rows read, {info.rows_kept} "
            f"kept, skipped {info.bad_rows} bad, {info.failed_rows} failed, {info.filtered_rows} "
            f"other models, {info.outside_rows} outside the window; {w.clipped} clipped to "
            f"--max-seq-len {max_seq_len}; {share:.1%} of prompt tokens in repeated blocks")
