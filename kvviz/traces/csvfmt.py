"""CSV traces: a header names the columns; chunks parse with numpy's C reader (loadtxt), and a
chunk with any unusable row is re-read line by line for the exact line and column."""
from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from kvviz.core.errors import TraceError
from kvviz.traces.chunks import split_first_line
from kvviz.traces.rows import Checks, Rows, Sink


@dataclass(frozen=True)
class CsvSpec:
    fmt: str
    time: str  # header names
    prompt: str
    output: str
    extra: str | None = None
    extra_is_model: bool = False  # a str column (BurstGPT Model); else an int prefix_group
    datetime: bool = False  # timestamps like 2023-11-16 18:15:46.6805900
    relative: bool = True  # arrival = time since the first row

    @property
    def checks(self) -> Checks:
        return Checks(self.time, self.prompt, self.output, monotonic=self.relative,
                      zero_output_is_failure=self.fmt == "burstgpt")

    @property
    def required(self) -> tuple[str, ...]:
        extra = (self.extra,) if self.extra_is_model else ()
        return (self.time, self.prompt, self.output) + extra


def split_line(line: str) -> list[str] | None:
    """The fields of one CSV line; None when it is not valid CSV (a stray carriage return)."""
    try:
        return next(csv.reader([line]), [])
    except csv.Error:
        return None


def header_fields(line: str) -> list[str]:
    return [f.strip() for f in split_line(line) or []]


class CsvReader:
    def __init__(self, spec: CsvSpec, sink: Sink, name: str) -> None:
        self.spec, self.sink, self.name = spec, sink, name
        self.t0: float | None = None
        self.ns0 = 0  # first timestamp in ns (datetime formats)
        self.cols: list[int] = []
        self.names: list[str] = []

    def _header(self, line: str, line_no: int) -> None:
        fields = header_fields(line)
        sp = self.spec
        missing = [c for c in sp.required if c not in fields]
        if missing:
            raise TraceError(f"{self.name}: line {line_no}: header lacks {', '.join(missing)} "
                             f"(a {sp.fmt} trace has {', '.join(sp.required)})")
        self.names = [sp.time, sp.prompt, sp.output]
        wanted = not sp.extra_is_model or self.sink.opts.model_filter is not None
        if sp.extra is not None and sp.extra in fields and wanted:  # strings parse slowly
            self.names.append(sp.extra)
        self.cols = [fields.index(c) for c in self.names]
        tdt = "M8[ns]" if sp.datetime else "f8"
        kinds = [tdt, "i8", "i8"] + (["U128" if sp.extra_is_model else "i8"]
                                     if len(self.names) == 4 else [])
        self.dtype = np.dtype([(f"c{i}", k) for i, k in enumerate(kinds)])
        # datetimes: the year read again on its own, to catch dates that M8[ns] wraps
        self.fast_cols = self.cols + [self.cols[0]] if sp.datetime else self.cols
        self.fast_dtype = np.dtype(self.dtype.descr + [("year", "M8[Y]")]) if sp.datetime \
            else self.dtype

    def read(self, chunks: Iterator[tuple[int, str]]) -> None:
        for line_no, text in chunks:
            if not self.cols:
                head, hline, text = split_first_line(line_no, text)
                if not head:
                    continue
                self._header(head, hline)
                line_no = hline + 1
            if not text.strip():
                continue
            rows = self._fast(text)
            if rows is None or not self.sink.take(rows):
                self.sink.take(self._slow(line_no, text))
            if self.sink.done:
                return
        if not self.cols:
            raise TraceError(f"{self.name}: empty file (expected a CSV header)")

    def _times(self, raw: np.ndarray) -> np.ndarray:
        if self.spec.datetime:  # exact to the nanosecond: subtract in int64, then scale
            nat = np.isnat(raw)
            ns = raw.astype("M8[ns]").astype(np.int64)
            if self.t0 is None and (~nat).any():
                self.t0 = 0.0
                self.ns0 = int(ns[np.argmin(nat)])
            t = (ns - self.ns0).astype(np.float64) / 1e9
            t[nat] = np.nan
            return t
        t = raw.astype(np.float64)
        if self.spec.relative:
            if self.t0 is None:
                ok = np.flatnonzero(np.isfinite(t))
                if not ok.size:
                    return t
                self.t0 = float(t[ok[0]])
            t = t - self.t0
        return t

    def _rows(self, arr: np.ndarray, line: np.ndarray | None, bad: list) -> Rows:
        r = Rows(self._times(arr["c0"]), arr["c1"].astype(np.int64),
                 arr["c2"].astype(np.int64), line=line, bad=bad)
        if len(self.names) == 4:
            if self.spec.extra_is_model:
                r.model = arr["c3"]
            else:
                r.group = arr["c3"].astype(np.int64)
        return r

    def _fast(self, text: str) -> Rows | None:
        try:
            arr = np.loadtxt(io.StringIO(text), delimiter=",", quotechar='"', comments=None,
                             usecols=self.fast_cols, dtype=self.fast_dtype, ndmin=1)
        except (ValueError, OverflowError):
            return None
        if self.spec.datetime and _wrapped(arr["c0"], arr["year"]).any():
            return None  # the line-by-line pass names the date
        return self._rows(arr, None, [])

    def _slow(self, line_no: int, text: str) -> Rows:
        vals: list[tuple] = []
        lines: list[int] = []
        bad: list[tuple[int, str, str]] = []
        width = max(self.cols) + 1
        conv = [self._conv_time, _int64, _int64]
        if len(self.names) == 4:
            conv.append(str if self.spec.extra_is_model else _group)
        for i, line in enumerate(text.split("\n")):
            if not line.strip():
                continue
            fields = split_line(line.rstrip("\r"))
            if fields is None:
                bad.append((line_no + i, "", "not a valid CSV line"))
                continue
            if len(fields) < width:
                missing = self.names[[c >= len(fields) for c in self.cols].index(True)]
                bad.append((line_no + i, missing, "the row has too few fields"))
                continue
            row = []
            for c, name, f in zip(self.cols, self.names, conv):
                raw = fields[c].strip()
                try:
                    row.append(f(raw))
                except (ValueError, OverflowError) as exc:
                    why = str(exc) if "nanosecond clock" in str(exc) else \
                        f"not a valid value: {raw[:40]!r}"
                    bad.append((line_no + i, name, why))
                    break
            else:
                vals.append(tuple(row))
                lines.append(line_no + i)
        arr = np.array(vals, dtype=self.dtype) if vals else np.zeros(0, self.dtype)
        return self._rows(arr, np.asarray(lines, np.int64), bad)

    def _conv_time(self, raw: str):
        if self.spec.datetime:
            ns = np.datetime64(raw, "ns")
            if _wrapped(ns, np.datetime64(raw, "Y")):
                raise ValueError(f"{raw[:40]!r} is outside the dates a nanosecond clock holds "
                                 f"({NS_RANGE})")
            return ns
        return float(raw)


NS_RANGE = "1677-09-21 to 2262-04-11"


def _wrapped(ns, year):
    """Where a date parsed as M8[ns] wrapped around (its year is not the year written): 2**64
    ns are about 584 years, so a wrapped date always lands in another year."""
    return ~np.isnat(ns) & (np.asarray(ns).astype("M8[Y]") != year)


def _group(raw: str) -> int:
    return -1 if raw == "" else _int64(raw)


def _int64(raw: str) -> int:
    """A token count that fits the int64 columns (the range checks then name bad values)."""
    v = int(raw)
    if not -(2**63) <= v < 2**63:
        raise OverflowError(f"{raw[:40]} does not fit in 64 bits")
    return v
