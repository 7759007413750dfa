"""What a trace reader is asked for (TraceOptions) and what it found (TraceInfo)."""
from __future__ import annotations

import math
from dataclasses import dataclass

FORMATS = ("azure", "burstgpt", "mooncake", "kvviz-csv", "kvviz-jsonl")
SUFFIXES = (".csv", ".jsonl", ".json", ".ndjson")  # file names a trace may have
MAX_LINE_BYTES = 1 << 20  # one row; longer lines are an error, not a memory bomb
MAX_TOKENS = 1 << 24  # a prompt or output longer than this is a bad row
MAX_ROWS = 20_000_000  # rows kept; --limit for more


@dataclass(frozen=True)
class TraceOptions:
    """How to read a trace. Times are in seconds of the trace's own clock.

    Kept rows have arrival in [start_s, start_s + duration_s); arrivals are then shifted so the
    window starts at 0 and divided by time_scale (2 = replay twice as fast).
    """

    fmt: str | None = None  # one of FORMATS; None = detect from the header / first line
    limit: int | None = None  # keep at most this many requests
    start_s: float = 0.0
    duration_s: float | None = None
    time_scale: float = 1.0
    skip_bad_rows: bool = False  # count unusable rows instead of stopping at the first
    model_filter: str | None = None  # BurstGPT: keep only this Model

    def __post_init__(self) -> None:
        if self.fmt is not None and self.fmt not in FORMATS:
            raise ValueError(f"fmt: expected one of {', '.join(FORMATS)}, "
                             f"got {self.fmt!r}")
        if self.limit is not None and self.limit < 1:
            raise ValueError(f"limit: must be >= 1, got {self.limit}")
        if not (math.isfinite(self.start_s) and self.start_s >= 0):
            raise ValueError(f"start_s: must be a finite number >= 0, got {self.start_s}")
        if self.duration_s is not None and not (math.isfinite(self.duration_s)
                                                and self.duration_s > 0):
            raise ValueError(f"duration_s: must be a finite number > 0, got {self.duration_s}")
        if not (math.isfinite(self.time_scale) and self.time_scale > 0):
            raise ValueError(f"time_scale: must be a finite number > 0, got {self.time_scale}")

    @property
    def end_s(self) -> float:
        return math.inf if self.duration_s is None else self.start_s + self.duration_s


@dataclass(frozen=True)
class TraceInfo:
    """What a trace held: every row read is kept or counted in exactly one skip bucket."""

    name: str
    fmt: str
    rows_read: int  # data rows seen (blank lines not counted)
    rows_kept: int
    bad_rows: int = 0  # unusable, skipped under skip_bad_rows
    failed_rows: int = 0  # BurstGPT: 0 response tokens (a failed request)
    filtered_rows: int = 0  # another model (model_filter)
    outside_rows: int = 0  # before start_s, past the duration, or past the limit
    span_s: float = 0.0  # last kept arrival - first, in the trace's clock
    hash_block_tokens: int = 0  # tokens per hash id (Mooncake: 512); 0 = no hash chains

    def summary(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}
