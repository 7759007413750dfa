"""Rows of a trace as columns, their checks, and the sink that keeps or counts each row.

A chunk parser (CSV or JSONL) turns text into a Rows record; `Sink.take` validates it
vectorized, drops or counts every row that is not kept, and stores the rest.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from kvviz.core.errors import TraceError
from kvviz.traces.options import MAX_ROWS, MAX_TOKENS, TraceOptions

SKIP_HINT = " (--skip-bad-rows skips and counts such rows)"


@dataclass
class Rows:
    """One chunk. t: float64 seconds on the trace's clock (NaN = unparseable)."""

    t: np.ndarray
    prompt: np.ndarray  # int64
    output: np.ndarray  # int64
    line: np.ndarray | None = None  # int64 line numbers; None on the fast path
    model: np.ndarray | None = None  # str, BurstGPT
    group: np.ndarray | None = None  # int64 prefix_group, kvviz format
    chains: list | None = None  # per row: list of hash ids, Mooncake
    bad: list = field(default_factory=list)  # (line, column, why) found while converting


@dataclass(frozen=True)
class Checks:
    """Per format: column names for messages and which rules apply."""

    time_col: str
    prompt_col: str
    output_col: str
    monotonic: bool = True  # timestamps must not go backwards
    zero_output_is_failure: bool = False  # BurstGPT


class Sink:
    """Keeps rows that pass, in order; counts the rest. `done` once the window or limit ends."""

    def __init__(self, name: str, checks: Checks, opts: TraceOptions) -> None:
        self.name, self.checks, self.opts = name, checks, opts
        self.parts: list[tuple] = []
        self.chain_lens: list[np.ndarray] = []
        self.chain_ids: list[np.ndarray] = []
        self.rows_read = self.kept = self.bad = self.failed = self.filtered = self.outside = 0
        self.chain_block = 0  # tokens per hash id, once a row carried hash ids
        self.t_max = -np.inf  # latest good timestamp so far
        self.done = False

    def error(self, line: int, column: str, why: str) -> TraceError:
        col = f"column '{column}': " if column else ""
        return TraceError(f"{self.name}: line {line}: {col}{why}{SKIP_HINT}")

    def bad_row(self, line: int, column: str, why: str) -> None:
        """A row that could not even be converted."""
        if not self.opts.skip_bad_rows:
            raise self.error(line, column, why)
        self.rows_read += 1
        self.bad += 1

    def problems(self, r: Rows) -> tuple[np.ndarray, list[tuple[np.ndarray, str, str]]]:
        c = self.checks
        n = r.t.size
        tests = [
            (~np.isfinite(r.t), c.time_col, "timestamp is not a finite time"),
            (r.t < 0 if not c.monotonic else np.zeros(n, bool), c.time_col,
             "timestamp must be >= 0"),
            ((r.prompt < 1) | (r.prompt > MAX_TOKENS), c.prompt_col,
             f"token count must be in [1, {MAX_TOKENS}]"),
            ((r.output < 0 if c.zero_output_is_failure else r.output < 1)
             | (r.output > MAX_TOKENS), c.output_col,
             f"token count must be in [{0 if c.zero_output_is_failure else 1}, {MAX_TOKENS}]"),
        ]
        if r.group is not None:
            tests.append((r.group < -1, "prefix_group", "must be >= -1"))
        bad = np.zeros(n, bool)
        for mask, _, _ in tests:
            bad |= mask
        if c.monotonic and n:
            good_t = np.where(bad, -np.inf, r.t)
            before = np.maximum.accumulate(np.concatenate([[self.t_max], good_t]))[:-1]
            back = ~bad & (r.t < before)
            tests.append((back, c.time_col, "timestamp goes backwards"))
            bad |= back
        return bad, tests

    def take(self, r: Rows) -> bool:
        """Validate and keep a chunk. Returns False when the chunk has a bad row but carries no
        line numbers (fast path): the caller re-parses it slowly for the message."""
        bad, tests = self.problems(r)
        if bad.any() and r.line is None:
            return False
        if not self.opts.skip_bad_rows and (bad.any() or r.bad):
            found = list(r.bad)
            if bad.any():
                i = int(np.argmax(bad))
                col, why = next((c, w) for m, c, w in tests if m[i])
                found.append((int(r.line[i]), col, why))
            raise self.error(*min(found))
        for line, col, why in r.bad:
            self.bad_row(line, col, why)
        n = r.t.size
        self.rows_read += n
        self.bad += int(bad.sum())
        keep = ~bad
        if self.checks.monotonic and keep.any():
            self.t_max = max(self.t_max, float(r.t[keep].max()))
        if self.checks.zero_output_is_failure:
            failed = keep & (r.output == 0)
            self.failed += int(failed.sum())
            keep &= ~failed
        if self.opts.model_filter is not None and r.model is not None:
            other = keep & (r.model != self.opts.model_filter)
            self.filtered += int(other.sum())
            keep &= ~other
        o = self.opts
        inside = keep & (r.t >= o.start_s) & (r.t < o.end_s)
        self.outside += int((keep & ~inside).sum())
        if self.checks.monotonic and o.duration_s is not None and n and r.t[keep].size \
                and float(r.t[keep][-1]) >= o.end_s:
            self.done = True
        keep = inside
        room = (o.limit if o.limit is not None else MAX_ROWS) - self.kept
        idx = np.flatnonzero(keep)
        if idx.size > room:
            if o.limit is None:
                raise TraceError(f"{self.name}: more than {MAX_ROWS} requests; "
                                 "use --limit or --duration-s")
            self.outside += int(idx.size - room)
            idx = idx[:room]
            self.done = True
        if self.kept + idx.size >= (o.limit or MAX_ROWS + 1):
            self.done = True
        self.kept += int(idx.size)
        group = r.group[idx] if r.group is not None else np.full(idx.size, -1, np.int64)
        self.parts.append((r.t[idx], r.prompt[idx], r.output[idx], group))
        if r.chains is not None:
            picked = [r.chains[i] for i in idx.tolist()]
            self.chain_lens.append(np.fromiter(map(len, picked), np.int64, len(picked)))
            self.chain_ids.append(np.fromiter((h for ch in picked for h in ch), np.int64))
        return True

    def columns(self) -> tuple[np.ndarray, ...]:
        if not self.parts:
            return tuple(np.zeros(0, d) for d in (np.float64, np.int64, np.int64, np.int64))
        return tuple(np.concatenate(c) for c in zip(*self.parts))
