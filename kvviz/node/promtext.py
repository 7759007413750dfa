"""Prometheus text exposition -> NodeSample, the typed record of one scrape of a serving node."""
from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum

from kvviz.core.errors import KvvizError
from kvviz.node import gauges
from kvviz.node.known_metrics import Engine, engine_of_series
from kvviz.node.servers import PoolRow, sglang_fields, sglang_pools, vllm_fields, vllm_pools

Labels = dict[str, str]
Rows = list[tuple[Labels, float]]
MAX_SERIES = 50_000  # series one scrape may hold; a vLLM node with 8 DP engines has ~5,000
_SAMPLE_LINE = re.compile(r"^[ \t]*[^#\s]", re.MULTILINE)


class GarbledMetricsError(KvvizError):
    """The endpoint answered, but not in Prometheus text format."""


class NodeStatus(StrEnum):
    OK = "ok"
    UNREACHABLE = "unreachable"  # refused, DNS failure, HTTP error status, dropped connection
    TIMEOUT = "timeout"  # no complete answer within the scrape timeout
    GARBLED = "garbled"  # answered, but the body is not Prometheus text (or too large)


@dataclass(frozen=True)
class NodeSample:
    """One scrape. Every metric is None when the node did not export it (or status != ok).

    Counters (`*_total`) are cumulative since the engine started; the per-interval rates are
    filled by `Scraper` from the previous ok sample and are None on the first one.
    """

    time: float  # unix seconds when the scrape started
    url: str
    status: NodeStatus
    message: str = ""  # why, when status != ok
    engine: Engine = "unknown"
    kv_usage: float | None = None  # 0..1 of the KV cache in use
    kv_used_tokens: float | None = None  # slots in use (usage x capacity when not exported)
    kv_capacity_tokens: int | None = None  # usable blocks x block_size, or SGLang's pool size
    num_running: int | None = None
    num_waiting: int | None = None
    # vLLM's own reasons (num_requests_waiting_by_reason, 0.32): waiting for scheduling capacity
    # (memory or a scheduler limit), deferred by transient constraints (LoRA, KV transfer)
    num_waiting_capacity: int | None = None
    num_waiting_deferred: int | None = None
    preemptions_total: float | None = None  # vLLM preemptions, SGLang retractions
    prefix_queries_total: float | None = None  # tokens looked up in the prefix cache
    prefix_hits_total: float | None = None  # of which found
    prefix_hit_rate: float | None = None  # since start (vLLM counters) or SGLang's gauge
    prefix_caching_off: bool = False  # vLLM says so (v0 hit rate -1, enable_prefix_caching)
    block_size: int | None = None  # slots per block (SGLang: page size)
    num_gpu_blocks: int | None = None
    kv_pools: int | None = None  # KV pools summed: vLLM DP engines, SGLang attention-DP ranks
    capacity_caveat: str = ""  # why kv_capacity_tokens is absent or partial (hybrid models)
    preempted_recent: int | None = None  # SGLang num_retracted_reqs: since its last report
    preemptions_per_s: float | None = None  # over the last interval
    prefix_hit_rate_interval: float | None = None  # hits/queries over the last interval
    interval_s: float | None = None  # seconds since the previous ok sample
    latency_s: float | None = None  # how long the scrape took
    raw: dict[str, float] = field(default_factory=dict)  # series key -> value, all series

    @property
    def ok(self) -> bool:
        return self.status == NodeStatus.OK

    def to_dict(self) -> dict:
        """JSON-safe: status as a string, NaN and infinities as None."""
        d = asdict(self)
        d["status"] = str(self.status)
        d["raw"] = {k: _finite_or_none(v) for k, v in self.raw.items()}
        return {k: _finite_or_none(v) if isinstance(v, float) else v for k, v in d.items()}

    @classmethod
    def from_dict(cls, d: dict) -> NodeSample:
        names = {f.name for f in fields(cls)}
        unknown = set(d) - names
        if unknown:
            raise KvvizError(f"NodeSample: unknown fields {sorted(unknown)}")
        kw = dict(d)
        kw["status"] = NodeStatus(kw["status"])
        kw["raw"] = {k: (math.nan if v is None else float(v)) for k, v in kw.get("raw", {}).items()}
        return cls(**kw)


def _finite_or_none(v: float | None) -> float | None:
    return None if v is None or not math.isfinite(v) else v


def series_key(name: str, labels: Labels) -> str:
    """`name{a="1",b="x"}` with labels sorted, escaped as in the exposition format."""
    if not labels:
        return name
    def esc(v: str) -> str:
        return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    body = ",".join(f'{k}="{esc(v)}"' for k, v in sorted(labels.items()))
    return f"{name}{{{body}}}"


def parse_series(text: str) -> list[tuple[str, Labels, float]]:
    """All samples as (sample name, labels, value); `_created` timestamps are dropped.

    Raises GarbledMetricsError when the text is not Prometheus exposition format.
    """
    from prometheus_client.parser import text_string_to_metric_families

    n = text.count("\n") + 1 - text.count("\n#") - text.startswith("#")  # >= sample lines
    if n > MAX_SERIES:  # then count exactly, still before anything is built for them
        n = sum(1 for _ in _SAMPLE_LINE.finditer(text))
    if n > MAX_SERIES:
        raise GarbledMetricsError(f"{n:,} series, more than kvviz reads ({MAX_SERIES:,}: a "
                                  "serving node exports a few thousand)")
    out: list[tuple[str, Labels, float]] = []
    try:
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if s.name.endswith("_created"):
                    continue
                out.append((s.name, dict(s.labels), float(s.value)))
    except Exception as exc:  # the parser raises ValueError, sometimes others, on bad input
        first = text.strip().splitlines()[0][:80] if text.strip() else ""
        raise GarbledMetricsError(f"not Prometheus text format ({exc}); starts {first!r}") from exc
    return out


def sample_from_text(text: str, *, url: str, time: float) -> NodeSample:
    """Parse one /metrics body into an ok NodeSample (raises GarbledMetricsError)."""
    series, problems = gauges.check(parse_series(text))
    by_name: dict[str, Rows] = {}
    for name, labels, value in series:
        by_name.setdefault(name, []).append((labels, value))
    engine = _detect_engine(by_name)
    values = {"vllm": vllm_fields, "sglang": sglang_fields}.get(engine, lambda _: {})(by_name)
    raw = {series_key(n, lab): v for n, lab, v in series}
    message = gauges.message(problems) or ("" if series else "no series exported")
    return NodeSample(time=time, url=url, status=NodeStatus.OK, message=message, engine=engine,
                      raw=raw, **values)


def _detect_engine(by_name: dict[str, Rows]) -> Engine:
    counts: dict[str, int] = {}
    for name in by_name:
        engine = engine_of_series(name)
        counts[engine] = counts.get(engine, 0) + 1
    for engine in ("vllm", "sglang"):  # vLLM first: its KV metrics are the richer ones
        if counts.get(engine):
            return engine  # type: ignore[return-value]
    return "unknown"


def pool_rows(raw: dict[str, float]) -> list[PoolRow]:
    """The node's KV pools (vLLM engines, SGLang attention-DP ranks) from a sample's `raw`."""
    text = "\n".join(f"{k} {v!r}" for k, v in raw.items() if v is not None)
    by_name: dict[str, Rows] = {}
    for name, labels, value in gauges.check(parse_series(text))[0]:
        by_name.setdefault(name, []).append((labels, value))
    engine = _detect_engine(by_name)
    pools = {"vllm": vllm_pools, "sglang": sglang_pools}.get(engine)
    return [] if pools is None else pools(by_name)
