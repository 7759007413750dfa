"""One workload through several allocator lanes: the Compare page's simulation.

A `CompareRequest` names the workload (synthetic, or an uploaded trace), the KV capacity, the
scheduler's limits (vLLM's knobs) and the lanes; `compare` runs it and returns one summary per
lane. Uploaded bytes are validated here
(size, suffix, rows) and parsed in a resource-limited child (kvviz/traces/sandboxed.py).
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from kvviz.core.config import CacheConfig, EngineConfig, LaneSpec, WorkloadConfig
from kvviz.core.errors import TraceError
from kvviz.core.workload import Workload, clip_workload, generate
from kvviz.engine.simulation import Simulation
from kvviz.traces import TraceInfo, TraceOptions
from kvviz.traces.options import SUFFIXES

MAX_UPLOAD_BYTES = 50 * 1024 * 1024
MAX_UPLOAD_ROWS = 1_000_000
ENGINE = EngineConfig()  # the engine every lane runs (a trace's max_seq_len replaces its own)


@dataclass(frozen=True)
class SyntheticWorkload:
    """A seeded synthetic workload (kvviz.core.workload.generate); rate 0 = all at t=0."""
    preset: str = "sharegpt-like"
    num_requests: int = 1000
    rate: float = 20.0
    seed: int = 0


@dataclass(frozen=True)
class UploadedTrace:
    """An uploaded trace file as bytes; max_seq_len 0 = the trace's longest request."""
    name: str
    data: bytes = field(repr=False)
    max_seq_len: int = 0
    skip_bad_rows: bool = False


@dataclass(frozen=True)
class SchedulerLimits:
    """The scheduler's knobs every lane runs under, vLLM's names and defaults
    (core.config.EngineConfig checks them, with the workload's max_seq_len: engine_for)."""
    max_num_seqs: int = ENGINE.max_num_seqs
    max_num_batched_tokens: int = ENGINE.max_batched_tokens
    enable_chunked_prefill: bool = ENGINE.enable_chunked_prefill
    watermark: float = ENGINE.watermark


@dataclass(frozen=True)
class CompareRequest:
    workload: SyntheticWorkload | UploadedTrace
    capacity_tokens: int
    lanes: tuple[str, ...] = ()  # lane labels (LaneSpec.parse), run in this order
    limits: SchedulerLimits = SchedulerLimits()


class Upload(NamedTuple):
    workload: Workload  # clipped to max_seq_len (see workload.clipped)
    info: TraceInfo
    max_seq_len: int  # as asked, or the trace's longest request


class LoadedWorkload(NamedTuple):
    workload: Workload
    engine: EngineConfig  # a trace's lanes reserve up to its own max_seq_len
    upload: Upload | None  # what an uploaded trace held (None: synthetic)


@dataclass(frozen=True)
class CompareResult:
    lanes: tuple[str, ...]
    summaries: tuple[dict, ...]  # Simulation.run's summary of each lane, in lane order
    step_ms: float  # simulated time per engine step


def parse_upload(name: str, data: bytes, opts: TraceOptions) -> tuple[Workload, TraceInfo]:
    """THE call site that parses uploaded bytes: in a resource-limited child
    (kvviz/traces/sandboxed.py). Bounded parsing, nothing executed."""
    from kvviz.traces.sandboxed import parse_upload_sandboxed

    return parse_upload_sandboxed(name, data, opts)


def read_upload_info(name: str, data: bytes, *, max_seq_len: int | None = None,
                     max_bytes: int = MAX_UPLOAD_BYTES, skip_bad_rows: bool = False) -> Upload:
    """Validate an uploaded trace of any known format (size, rows) and parse it; raises
    TraceError. max_seq_len None: the trace's longest request (nothing clipped)."""
    if len(data) > max_bytes:
        raise TraceError(f"{name}: {len(data) / 2**20:.1f} MB is over the "
                         f"{max_bytes / 2**20:.0f} MB limit")
    if not name.lower().endswith(SUFFIXES):
        raise TraceError(f"{name}: expected a .csv or .jsonl trace")
    if data.count(b"\n") > MAX_UPLOAD_ROWS + 1:
        raise TraceError(f"{name}: more than {MAX_UPLOAD_ROWS} rows")
    w, info = parse_upload(name, data, TraceOptions(skip_bad_rows=skip_bad_rows))
    msl = max(2, int(w.final_len.max())) if max_seq_len is None else max_seq_len
    return Upload(clip_workload(w, msl), info, msl)


def load_workload(source: SyntheticWorkload | UploadedTrace) -> LoadedWorkload:
    """The requests of a source and the engine they run under; raises TraceError (upload) or
    ValueError (synthetic settings). Parsing an upload costs a child process."""
    if isinstance(source, UploadedTrace):
        up = read_upload_info(source.name, source.data, max_seq_len=source.max_seq_len or None,
                              skip_bad_rows=source.skip_bad_rows)
        return LoadedWorkload(up.workload, replace(ENGINE, max_seq_len=up.max_seq_len), up)
    cfg = WorkloadConfig(source.preset, num_requests=source.num_requests,
                         rate=source.rate or math.inf, seed=source.seed,
                         max_seq_len=ENGINE.max_seq_len)
    return LoadedWorkload(generate(cfg), ENGINE, None)


def engine_for(request: CompareRequest, loaded: LoadedWorkload) -> EngineConfig:
    """The engine the request's lanes run under: the loaded workload's (its max_seq_len) with
    the request's scheduler limits. ValueError "field: why" (EngineConfig's field names, e.g.
    max_batched_tokens below max_seq_len with chunked prefill off)."""
    lim = request.limits
    return replace(loaded.engine, max_num_seqs=lim.max_num_seqs,
                   max_batched_tokens=lim.max_num_batched_tokens,
                   enable_chunked_prefill=lim.enable_chunked_prefill, watermark=lim.watermark)


def compare(request: CompareRequest, *, loaded: LoadedWorkload | None = None,
            progress: Callable[[int, int], None] | None = None) -> CompareResult:
    """Run the request's workload through each of its lanes (same requests, same simulated
    times). `loaded`: load_workload(request.workload), when the caller already has it.
    `progress(done, total)` is called as requests finish. Raises ValueError on a bad lane label
    or scheduler limits that cannot run (engine_for)."""
    loaded = loaded or load_workload(request.workload)
    engine = engine_for(request, loaded)
    sim = Simulation(loaded.workload, [LaneSpec.parse(lane) for lane in request.lanes],
                     CacheConfig(capacity_tokens=request.capacity_tokens), engine)
    return CompareResult(request.lanes, tuple(sim.run(progress=progress)), engine.step_ms)
