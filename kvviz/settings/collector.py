"""CollectorConfig: every setting of one collector run, validated here and nowhere else.

The one settings record: `kvviz collect`'s flags and `python -m collectors`'s
(kvviz/settings/flags.py: one field per flag, same name with `-` for `_`; `--lane` fills
`lanes`), a config file (`--config FILE`, read by `load`) and the dashboard
(kvviz/runs/jobs.py, which writes it as that file) all build it, and the collector
(collectors/launch.py, collectors/engine_collector.py) reads it unchanged. Lanes are typed
LaneSpecs; text becomes a lane only in `parse_lanes`, at the edges (a file, a flag, a form).
Numeric ranges are kvviz/core/limits.py's, so a flag and a config field accept the same values.
A bad value raises ValueError "field: why"; `as_flags` turns that into "--flag: why".

`duration` is the run's length (--duration); `duration_s` is the trace window (the trace
flag --duration-s, with start_s). Resolving the config (the device actually present, the
model shape, reading a trace) is collectors/launch.py's `build`: it needs torch or the file.
"""
from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

from kvviz.core import limits as at
from kvviz.core import safeio
from kvviz.core.config import (
    DEFAULT_LANES,
    LENGTH_PRESETS,
    MODEL_PRESETS,
    LaneSpec,
    check_lane_blocks,
)
from kvviz.core.errors import KvvizError
from kvviz.traces.options import FORMATS, TraceOptions

MAX_FILE_BYTES = 1 << 16  # a config file is a few hundred bytes

STEPS_PER_S = at.float_range(0.0, 1e6)
HZ = at.float_range(0.0, 100.0, lo_open=True)
BUDGET_MB = at.float_range(0.0, 2.0**20)
PORT = at.int_range(1, 65535)
TORCH_THREADS = at.int_range(0, 4096)
MAX_STEPS = at.int_range(1, 10**12)
MEMORY_BUDGET_MB = at.float_range(1.0, 2.0**24)  # kvviz/settings/memory.py checks the total
# field -> the range of its flag (None allowed where the field's default is None)
RANGES = {"requests": at.REQUESTS, "rate": at.RATE, "prefix_sharing": at.SHARE,
          "capacity_tokens": at.CAPACITY_TOKENS, "max_seq_len": at.MAX_SEQ_LEN,
          "max_num_seqs": at.MAX_NUM_SEQS, "max_num_batched_tokens": at.BATCHED_TOKENS,
          "watermark": at.WATERMARK, "seed": at.SEED, "duration": at.SECONDS,
          "steps_per_s": STEPS_PER_S, "max_steps": MAX_STEPS, "hz": HZ,
          "blockmap_budget_mb": BUDGET_MB, "metrics_port": PORT, "torch_threads": TORCH_THREADS,
          "torch_snapshot_every": at.SECONDS, "memory_budget_mb": MEMORY_BUDGET_MB}
CHOICES = {"mode": ("real", "sim"), "device": ("auto", "cpu", "cuda"),
           "workload": tuple(LENGTH_PRESETS), "arrival": ("poisson", "bursty"),
           "kv_events_format": ("vllm", "sglang"), "trace_format": (None, *FORMATS),
           "model": (None, *MODEL_PRESETS)}
TEXT = ("trace", "model_filter", "out", "metrics_address", "kv_events", "kv_events_replay")
SWITCHES = ("skip_bad_rows", "loop", "overwrite", "quiet", "audit", "kv_events_record",
            "enable_chunked_prefill")
TRACE_FIELDS = {"trace_format": "fmt", "limit": "limit", "start_s": "start_s",
                "duration_s": "duration_s", "time_scale": "time_scale",
                "skip_bad_rows": "skip_bad_rows", "model_filter": "model_filter"}


@dataclasses.dataclass(frozen=True)
class CollectorConfig:
    """Defaults are `kvviz collect`'s; field `x_y` is flag `--x-y` (`lanes` is `--lane`)."""

    mode: str = "real"  # real: torch K/V pools + attention; sim: allocator metadata only
    device: str = "auto"  # auto = cuda when available, else cpu
    model: str | None = None  # a MODEL_PRESETS name; None: config.model_for's default
    workload: str = "sharegpt-like"  # a LENGTH_PRESETS name
    requests: int = 1000
    rate: float = at.DEFAULT_RATE  # arrivals per second of wall time; inf = all at once
    arrival: str = "poisson"
    prefix_sharing: float = 0.0
    trace: str | None = None  # a trace file replayed instead of the workload
    trace_format: str | None = None  # the trace flags (kvviz.traces.TraceOptions)
    limit: int | None = None
    start_s: float = 0.0
    duration_s: float | None = None
    time_scale: float = 1.0
    skip_bad_rows: bool = False
    model_filter: str | None = None
    lanes: tuple[LaneSpec, ...] = dataclasses.field(  # typed; text only at the edges
        default_factory=lambda: DEFAULT_LANES)
    capacity_tokens: int = at.DEFAULT_CAPACITY_TOKENS
    max_seq_len: int | None = None  # None: 2048, or a trace's longest request
    max_num_seqs: int = 256  # the scheduler's knobs, under vLLM's names (core.config.EngineConfig)
    max_num_batched_tokens: int = 8192
    enable_chunked_prefill: bool = True
    watermark: float = 0.0
    seed: int = 0
    duration: float | None = None  # seconds; None: until stopped or the workload is exhausted
    steps_per_s: float = 20.0  # 0 = no pacing
    max_steps: int | None = None  # engine steps; None: no bound (the run ends as `duration` says)
    hz: float = 4.0
    loop: bool = False
    out: str | None = None  # None: runs/<UTC time>.db
    overwrite: bool = False
    blockmap_budget_mb: float = 200.0
    memory_budget_mb: float | None = None  # the whole run's memory; None: 80% of available
    quiet: bool = False
    audit: bool = False
    metrics_port: int | None = None
    metrics_address: str = "127.0.0.1"
    torch_threads: int = 1
    torch_snapshot_every: float | None = None
    kv_events: str | None = None
    kv_events_replay: str | None = None
    kv_events_format: str = "vllm"
    kv_events_record: bool = False  # record the prefix lanes' events into the run (no socket)

    def __post_init__(self) -> None:
        for name, typ in RANGES.items():
            value = getattr(self, name)
            if value is not None or DEFAULTS[name] is not None:
                object.__setattr__(self, name, typ.check(name, value))
        for name, allowed in CHOICES.items():
            if getattr(self, name) not in allowed:
                shown = ", ".join(str(a) for a in allowed if a is not None)
                raise ValueError(f"{name}: expected one of {shown}, got {getattr(self, name)!r}")
        for name in TEXT:
            value = getattr(self, name)
            if not (isinstance(value, str) or value is None and DEFAULTS[name] is None):
                raise ValueError(f"{name}: expected text, got {type(value).__name__}")
        for name in SWITCHES:
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name}: expected true or false, "
                                 f"got {type(getattr(self, name)).__name__}")
        self._check_lanes()
        if self.trace is not None:
            self.trace_options()
        if self.audit and self.mode != "real":
            raise ValueError("audit: needs mode real (sim mode has no K/V pools to audit)")

    def _check_lanes(self) -> None:
        lanes = self.lanes
        if isinstance(lanes, str) or not isinstance(lanes, (list, tuple)) or not lanes:
            raise ValueError("lanes: expected a list of one or more lane specs")
        if not all(isinstance(s, LaneSpec) for s in lanes):
            raise ValueError("lanes: each lane is a LaneSpec (text such as paged:16 is read "
                             "by parse_lanes)")
        for s in lanes:  # the file and the flags carry a lane as its label: it must say all
            if LaneSpec.parse(s.label) != s:
                raise ValueError(f"lanes: {s!r} has no text form (contiguous cells are 1 token)")
        object.__setattr__(self, "lanes", tuple(lanes))
        check_lane_blocks(self.lanes, self.capacity_tokens)

    def trace_options(self) -> TraceOptions:
        """The trace flags as kvviz.traces options (ValueError names this config's field)."""
        kw = {opt: getattr(self, name) for name, opt in TRACE_FIELDS.items()}
        for name in ("limit", "start_s", "duration_s", "time_scale"):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, (int, float)) or isinstance(v, bool)):
                raise ValueError(f"{name}: expected a number, got {type(v).__name__}")
        if not isinstance(self.model_filter, (str, type(None))):
            raise ValueError("model_filter: expected text")
        try:
            return TraceOptions(**kw)
        except ValueError as exc:
            opt, _, why = str(exc).partition(": ")
            name = {v: k for k, v in TRACE_FIELDS.items()}.get(opt, opt)
            raise ValueError(f"{name}: {why}") from None

    # ---- as data: the file the dashboard hands to the collector process ---------------
    def to_json(self) -> str:
        """One JSON object, field -> value; infinity as the text "inf"."""
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        data = {k: ("inf" if isinstance(v, float) and math.isinf(v) else v)
                for k, v in data.items()}
        return json.dumps({**data, "lanes": [s.label for s in self.lanes]}, indent=1,
                          allow_nan=False)

    @classmethod
    def from_json(cls, text: str) -> CollectorConfig:
        """A config from `to_json`'s text; missing fields take their defaults. ValueError
        names an unknown or bad field."""
        try:
            data = json.loads(text, parse_constant=_no_constant, parse_float=_finite,
                              object_pairs_hook=_no_duplicates)
        except json.JSONDecodeError as exc:
            raise ValueError(f"not JSON ({exc})") from None
        except RecursionError:
            raise ValueError("not a config: nested too deeply") from None
        if not isinstance(data, dict):
            raise ValueError(f"expected a JSON object of settings, got {type(data).__name__}")
        unknown = sorted(set(data) - set(DEFAULTS))
        if unknown:
            raise ValueError(f"{unknown[0]}: not a collector setting")
        data = {k: (math.inf if v == "inf" and k in RANGES else v) for k, v in data.items()}
        if "lanes" in data:
            data["lanes"] = parse_lanes(data["lanes"])
        return cls(**data)

    def save(self, path: Path) -> Path:
        path.write_text(self.to_json() + "\n")
        return path

    @classmethod
    def load(cls, path: Path, what: str = "config") -> CollectorConfig:
        """The config in file `path` (a regular file of at most MAX_FILE_BYTES, never a FIFO
        or device); ValueError "<what> PATH: field: why" for a bad one."""
        try:
            raw = safeio.read_bytes(path, what, MAX_FILE_BYTES)
        except KvvizError as exc:
            raise ValueError(str(exc)) from None
        try:
            return cls.from_json(raw.decode("utf-8"))
        except UnicodeDecodeError:
            why = "not UTF-8 text"
        except ValueError as exc:
            why = str(exc)
        raise ValueError(f"{what} {safeio.printable(path)}: {why}")


def parse_lanes(texts: object) -> tuple[LaneSpec, ...]:
    """Lane texts (a config file's list, `--lane`s, the Live form) as LaneSpecs: the one place
    a lane is read from text. ValueError "lanes: ..." names the bad one."""
    if isinstance(texts, str) or not isinstance(texts, (list, tuple)) or not texts:
        raise ValueError("lanes: expected a list of one or more lane specs")
    if not all(isinstance(t, str) for t in texts):
        raise ValueError("lanes: each lane is a text such as paged:16")
    try:
        return tuple(LaneSpec.parse(t) for t in texts)
    except ValueError as exc:  # "lane: 'paged:x': why"
        raise ValueError(f"lanes: {str(exc).removeprefix('lane: ')}") from None


DEFAULTS = {f.name: (DEFAULT_LANES if f.name == "lanes" else f.default)
            for f in dataclasses.fields(CollectorConfig)}  # field -> default


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not a setting value (write \"inf\" for infinity)")


def _finite(text: str) -> float:
    """A JSON number; one past the float range (1e400) is refused, not read as infinity."""
    v = float(text)
    if math.isinf(v):
        raise ValueError(f"{text[:40]} is past the float range (write \"inf\" for infinity)")
    return v


def _no_duplicates(pairs: list[tuple[str, object]]) -> dict:
    """A JSON object; a key given twice is refused, naming it (json keeps the last silently)."""
    out: dict = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"{k}: given twice")
        out[k] = v
    return out


def flag(field: str) -> str:
    """The `kvviz collect` flag of a config field."""
    return "--lane" if field == "lanes" else "--" + field.replace("_", "-")


def as_flags(exc: ValueError) -> ValueError:
    """"field: why" as "--flag: why" (for the CLI's error line)."""
    field, sep, why = str(exc).partition(": ")
    if sep and field in DEFAULTS:
        return ValueError(f"{flag(field)}: {why}")
    return exc


def from_flags(given: dict, base: CollectorConfig | None = None) -> CollectorConfig:
    """`base` (default: the defaults) with the fields the command line gave; ValueError
    names the flag."""
    try:
        if "lanes" in given:  # --lane texts
            given = {**given, "lanes": parse_lanes(given["lanes"])}
        return dataclasses.replace(base or CollectorConfig(), **given)
    except ValueError as exc:
        raise as_flags(exc) from None
