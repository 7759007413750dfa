"""Synthetic request streams and trace files (CSV / JSONL).

A Workload is columns of equal length, sorted by arrival:
arrival_s float64, prompt int64, output int64, prefix_group int64 (-1 = no shared prefix).
"""
from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kvviz import safeio
from kvviz.config import LENGTH_PRESETS, WorkloadConfig
from kvviz.errors import TraceError

TRACE_FIELDS = ("arrival_s", "prompt_tokens", "output_tokens", "prefix_group")
MAX_TRACE_ROWS = 1_000_000
MAX_TRACE_BYTES = 512 * 2**20
MAX_LINE_CHARS = 128 * 1024  # one request is a few dozen characters
MAX_TOKENS = 2**31 - 1  # per request; int64 sums over a million rows stay exact
MAX_ARRIVAL_S = 1e12


@dataclass(frozen=True, eq=False)
class Workload:
    arrival_s: np.ndarray
    prompt: np.ndarray
    output: np.ndarray
    prefix_group: np.ndarray
    prefix_tokens: int = 0  # length of each group's shared system prompt

    def __len__(self) -> int:
        return int(self.arrival_s.shape[0])

    @property
    def final_len(self) -> np.ndarray:
        return self.prompt + self.output

    @property
    def total_output_tokens(self) -> int:
        return int(self.output.sum())


def _lognormal(rng: np.random.Generator, mean: float, sigma: float, n: int) -> np.ndarray:
    if sigma == 0:
        return rng.integers(1, int(2 * mean), n, endpoint=True).astype(np.float64)
    mu = math.log(mean) - sigma * sigma / 2  # so that E[x] = mean
    return rng.lognormal(mu, sigma, n)


def arrivals(rng: np.random.Generator, cfg: WorkloadConfig) -> np.ndarray:
    n = cfg.num_requests
    if math.isinf(cfg.rate):
        return np.zeros(n)
    if cfg.arrival == "poisson":
        gaps = rng.exponential(1.0 / cfg.rate, n)
    else:  # gamma gaps with the same mean; shape < 1 clusters requests into bursts
        gaps = rng.gamma(cfg.burstiness, 1.0 / (cfg.rate * cfg.burstiness), n)
    return np.cumsum(gaps) - gaps[0]


def generate(cfg: WorkloadConfig) -> Workload:
    """A seeded synthetic workload; the same config always gives the same requests."""
    rng = np.random.default_rng(cfg.seed)
    p = LENGTH_PRESETS[cfg.preset]
    n = cfg.num_requests
    prompt = np.maximum(1, np.rint(_lognormal(rng, p.prompt_mean, p.sigma, n))).astype(np.int64)
    output = np.maximum(1, np.rint(_lognormal(rng, p.output_mean, p.sigma, n))).astype(np.int64)
    group = np.full(n, -1, np.int64)
    if cfg.prefix_share > 0:
        shared = rng.random(n) < cfg.prefix_share
        group[shared] = rng.integers(0, cfg.prefix_groups, int(shared.sum()))
        prompt[shared] += cfg.prefix_tokens
    prompt, output = clip_lengths(prompt, output, cfg.max_seq_len)
    return Workload(arrivals(rng, cfg), prompt, output, group,
                    cfg.prefix_tokens if cfg.prefix_share > 0 else 0)


def clip_lengths(prompt: np.ndarray, output: np.ndarray, max_seq_len: int):
    """Keep prompt + output <= max_seq_len: the prompt keeps at most max_seq_len - 1."""
    prompt = np.minimum(prompt, max_seq_len - 1)
    output = np.minimum(output, max_seq_len - prompt)
    return prompt, output


# ---- traces -------------------------------------------------------------------------------
def _parse_row(row: dict, where: str) -> tuple[float, int, int, int]:
    vals = []
    for f in TRACE_FIELDS:
        raw = row.get(f)
        if raw is None or (isinstance(raw, str) and raw.strip() == ""):
            if f == "prefix_group":
                vals.append(-1)
                continue
            raise TraceError(f"{where}: field '{f}' is missing")
        if isinstance(raw, bool) or not isinstance(raw, (str, int, float)):
            raise TraceError(f"{where}: field '{f}' is not a number: {_short(raw)}")
        text = str(raw).strip()
        try:
            if len(text) > 40:
                raise ValueError
            v = float(text) if f == "arrival_s" else int(text)
        except (TypeError, ValueError):
            raise TraceError(f"{where}: field '{f}' is not a number: {_short(raw)}") from None
        if f == "arrival_s" and not (math.isfinite(v) and 0 <= v <= MAX_ARRIVAL_S):
            raise TraceError(f"{where}: field 'arrival_s' must be a finite number in "
                             f"[0, {MAX_ARRIVAL_S:g}], got {_short(raw)}")
        if f in ("prompt_tokens", "output_tokens") and not 1 <= v <= MAX_TOKENS:
            raise TraceError(f"{where}: field '{f}' must be in [1, {MAX_TOKENS}], "
                             f"got {_short(raw)}")
        if f == "prefix_group" and not -1 <= v <= MAX_TOKENS:
            raise TraceError(f"{where}: field 'prefix_group' must be in [-1, {MAX_TOKENS}], "
                             f"got {_short(raw)}")
        vals.append(v)
    return vals[0], vals[1], vals[2], vals[3]


def _short(v: object) -> str:
    r = repr(v) if isinstance(v, (str, int, float, bool, type(None))) else type(v).__name__
    return safeio.printable(r if len(r) <= 40 else r[:37] + "...")


def _check_lines(text: str, name: str) -> None:
    """Refuse a line longer than MAX_LINE_CHARS (names the first such line)."""
    for i, line in enumerate(text.split("\n"), 1):
        if len(line) > MAX_LINE_CHARS:
            raise TraceError(f"{name}: line {i}: {len(line):,} characters is over the "
                             f"{MAX_LINE_CHARS:,}-character limit for one request")


def parse_trace(text: str, name: str = "trace", *, max_seq_len: int = 2048,
                prefix_tokens: int = 256) -> Workload:
    """Parse CSV (with a header) or JSONL. Errors name the file, the line and the field."""
    name = safeio.printable(name)
    lines = text.lstrip("\ufeff")
    if max(map(len, lines.split("\n"))) > MAX_LINE_CHARS:
        _check_lines(lines, name)
    if "\x00" in lines:
        line = lines.count("\n", 0, lines.index("\x00")) + 1
        raise TraceError(f"{name}: line {line}: NUL byte (not a text trace)")
    first = lines.lstrip()[:1]
    rows: list[tuple[float, int, int, int]] = []
    if first == "{":
        for i, line in enumerate(lines.splitlines(), 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise TraceError(f"{name}: line {i}: not valid JSON at column {exc.colno} "
                                 f"({exc.msg})") from None
            except RecursionError:
                raise TraceError(f"{name}: line {i}: JSON nested too deeply") from None
            if not isinstance(obj, dict):
                raise TraceError(f"{name}: line {i}: expected a JSON object")
            rows.append(_parse_row(obj, f"{name}: line {i}"))
            if len(rows) > MAX_TRACE_ROWS:
                raise TraceError(f"{name}: more than {MAX_TRACE_ROWS} rows")
    else:
        reader = csv.DictReader(io.StringIO(lines))
        header = reader.fieldnames or []
        missing = [f for f in TRACE_FIELDS[:3] if f not in header]
        if missing:
            raise TraceError(f"{name}: line 1: header lacks {', '.join(missing)} "
                             f"(expected {', '.join(TRACE_FIELDS)})")
        try:
            for row in reader:
                rows.append(_parse_row(row, f"{name}: line {reader.line_num}"))
                if len(rows) > MAX_TRACE_ROWS:
                    raise TraceError(f"{name}: more than {MAX_TRACE_ROWS} rows")
        except csv.Error as exc:
            raise TraceError(f"{name}: line {reader.line_num}: not valid CSV ({exc})") from None
    if not rows:
        raise TraceError(f"{name}: no requests in the trace")
    arr = np.array(rows, dtype=np.float64)
    order = np.argsort(arr[:, 0], kind="stable")
    arr = arr[order]
    prompt, output = clip_lengths(arr[:, 1].astype(np.int64), arr[:, 2].astype(np.int64),
                                  max_seq_len)
    group = arr[:, 3].astype(np.int64)
    return Workload(arr[:, 0], prompt, output, group, prefix_tokens if (group >= 0).any() else 0)


def load_trace(path: str | Path, **kw) -> Workload:
    """Read a trace: a regular file (never a FIFO or device) of at most MAX_TRACE_BYTES."""
    path = Path(path)
    if not path.exists():
        raise TraceError(f"{safeio.printable(path)}: no such trace file")
    try:
        data = safeio.read_bytes(path, "trace", MAX_TRACE_BYTES)
    except safeio.PathError as exc:
        raise TraceError(str(exc)) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise TraceError(f"{safeio.printable(path)}: line {line}: not UTF-8 text "
                         "(expected CSV or JSONL)") from None
    return parse_trace(text, str(path), **kw)


def is_kvviz_trace(path: Path) -> bool:
    """Whether a file starts like a trace that dump_trace writes (CSV header or JSONL row)."""
    first = safeio.head(path, 4096).split(b"\n", 1)[0].strip()
    if first.startswith(",".join(TRACE_FIELDS[:3]).encode()):
        return True
    try:
        obj = json.loads(first)
    except (ValueError, RecursionError):
        return False
    return isinstance(obj, dict) and all(f in obj for f in TRACE_FIELDS[:3])


def dump_trace(w: Workload, path: str | Path) -> None:
    """Write CSV (.csv) or JSONL (anything else) with the four trace fields, atomically
    (a temporary file beside `path`, then renamed). Callers check the path first
    (safeio.check_output): this replaces whatever is there."""
    path = Path(path)
    cols = (w.arrival_s, w.prompt, w.output, w.prefix_group)

    def write(tmp: Path) -> None:
        with tmp.open("w", newline="", encoding="utf-8") as fh:
            if path.suffix.lower() == ".csv":
                out = csv.writer(fh)
                out.writerow(TRACE_FIELDS)
                for a, p, o, g in zip(*cols):
                    out.writerow([repr(float(a)), int(p), int(o), int(g)])
            else:
                for a, p, o, g in zip(*cols):
                    row = dict(zip(TRACE_FIELDS, (float(a), int(p), int(o), int(g))))
                    fh.write(json.dumps(row) + "\n")

    safeio.atomic_write(path, write, "trace")
