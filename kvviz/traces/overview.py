"""What a loaded trace holds, in numbers a person checks before running it."""
from __future__ import annotations

import numpy as np

from kvviz.core.workload import Workload
from kvviz.traces.options import TraceInfo


def prefix_reuse_share(w: Workload) -> float:
    """Share of prompt tokens in hash blocks already seen earlier in the trace: what a prefix
    cache without limits could hit (a lane's hit rate is at most this, at its block size)."""
    if not w.has_chains or not len(w):
        return 0.0
    ptr, ids, block = w.chains()
    if not ids.size:
        return 0.0
    lens = np.diff(ptr)
    req = np.repeat(np.arange(len(w)), lens)
    pos = np.arange(ids.size) - np.repeat(ptr[:-1], lens)
    _, first = np.unique(ids, return_index=True)
    seen = np.ones(ids.size, bool)
    seen[first] = False
    tokens = np.clip(w.prompt[req] - pos * block, 0, block)
    return float(tokens[seen].sum() / max(1, int(w.prompt.sum())))


def _dist(x: np.ndarray) -> str:
    p50, p90, p99 = np.percentile(x, [50, 90, 99])
    return f"median {p50:.0f}, p90 {p90:.0f}, p99 {p99:.0f}, max {int(x.max())}"


def overview(w: Workload, info: TraceInfo | None, max_seq_len: int) -> list[tuple[str, str]]:
    """(what, value) rows: format, rows, time span, length distributions, reuse, skips, clips."""
    rows = []
    if info is not None:
        rows += [("format", info.fmt),
                 ("rows read / kept", f"{info.rows_read} / {info.rows_kept}"),
                 ("time span", f"{info.span_s:.1f} s of the trace")]
    span = float(w.arrival_s[-1] - w.arrival_s[0]) if len(w) else 0.0
    rows += [("replayed over", f"{span:.1f} s"),
             ("prompt tokens", _dist(w.prompt)), ("output tokens", _dist(w.output)),
             ("prefix reuse share", f"{prefix_reuse_share(w):.1%} of prompt tokens")]
    if info is not None:
        rows += [("skipped", f"{info.bad_rows} bad, {info.failed_rows} failed (0 output), "
                             f"{info.filtered_rows} other models, {info.outside_rows} outside")]
    rows.append(("clipped", f"{w.clipped} requests cut to max_seq_len {max_seq_len}"))
    return rows
