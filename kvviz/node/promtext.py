"""Prometheus text exposition -> NodeSample, the typed record of one scrape of a serving node."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum

from kvviz.errors import KvvizError
from kvviz.node.known_metrics import Engine, engine_of_series, name_variants

Labels = dict[str, str]
Rows = list[tuple[Labels, float]]


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
    kv_capacity_tokens: int | None = None  # num_gpu_blocks x block_size, or SGLang's pool size
    num_running: int | None = None
    num_waiting: int | None = None
    preemptions_total: float | None = None
    prefix_queries_total: float | None = None  # tokens looked up in the prefix cache
    prefix_hits_total: float | None = None  # of which found
    prefix_hit_rate: float | None = None  # since start (vLLM counters) or SGLang's gauge
    block_size: int | None = None  # slots per block (SGLang: page size)
    num_gpu_blocks: int | None = None
    preemptions_per_s: float | None = None  # over the last interval
    prefix_hit_rate_interval: float | None = None  # hits/queries over the last interval
    interval_s: float | None = None  # seconds since the previous ok sample
    latency_s: float | None = None  # how long the scrape took
    raw: dict[str, float] = field(default_factory=dict)  # series key -> value, all series

    @property
    def ok(self) -> bool:
        return self.status == NodeStatus.OK

    def to_dict(self) -> dict:
        """JSON-safe: status as a string, NaN as None."""
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
    return None if v is None or math.isnan(v) else v


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
    series = parse_series(text)
    by_name: dict[str, Rows] = {}
    for name, labels, value in series:
        by_name.setdefault(name, []).append((labels, value))
    engine = _detect_engine(by_name)
    values = {"vllm": _vllm_fields, "sglang": _sglang_fields}.get(engine, lambda _: {})(by_name)
    raw = {series_key(n, lab): v for n, lab, v in series}
    message = "" if series else "no series exported"
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


def _primary_rank(labels: Labels) -> bool:
    # tensor-parallel ranks share one KV cache and report the same numbers
    return labels.get("tp_rank", "0") in ("0", "")


def _pick(by_name: dict[str, Rows], name: str) -> Rows:
    for variant in name_variants(name):
        if variant in by_name:
            return [(lab, v) for lab, v in by_name[variant]
                    if _primary_rank(lab) and not math.isnan(v)]
    return []


def _sum(rows: Rows) -> float | None:
    return sum(v for _, v in rows) if rows else None


def _mean(rows: Rows) -> float | None:
    return sum(v for _, v in rows) / len(rows) if rows else None


def _int_or_none(v: float | str | None) -> int | None:
    try:
        return None if v is None else int(float(v))
    except (TypeError, ValueError):  # labels like num_gpu_blocks="None"
        return None


def _ratio(num: float | None, den: float | None) -> float | None:
    return num / den if num is not None and den else None


def _engine_key(labels: Labels) -> tuple[str, str]:
    return labels.get("engine", ""), labels.get("dp_rank", "")


def _vllm_fields(by_name: dict[str, Rows]) -> dict:
    block_size = None
    blocks_per_engine: dict[tuple[str, str], int] = {}
    for labels, _ in _pick(by_name, "vllm:cache_config_info"):
        block_size = block_size or _int_or_none(labels.get("block_size"))
        n = _int_or_none(labels.get("num_gpu_blocks"))
        if n is not None:
            blocks_per_engine[_engine_key(labels)] = n
    num_gpu_blocks = sum(blocks_per_engine.values()) if blocks_per_engine else None
    capacity = num_gpu_blocks * block_size if num_gpu_blocks and block_size else None

    usage_rows = _pick(by_name, "vllm:kv_cache_usage_perc") or _pick(
        by_name, "vllm:gpu_cache_usage_perc")
    weights = [blocks_per_engine.get(_engine_key(lab)) for lab, _ in usage_rows]
    if usage_rows and capacity and all(weights):
        used = sum(v * w * block_size for (_, v), w in zip(usage_rows, weights))
        kv_usage = used / (sum(weights) * block_size)
    else:
        kv_usage = _mean(usage_rows)
        used = kv_usage * capacity if kv_usage is not None and capacity else None

    queries = _sum(_pick(by_name, "vllm:prefix_cache_queries") or _pick(
        by_name, "vllm:gpu_prefix_cache_queries"))
    hits = _sum(_pick(by_name, "vllm:prefix_cache_hits") or _pick(
        by_name, "vllm:gpu_prefix_cache_hits"))
    hit_rate = _ratio(hits, queries)
    if hit_rate is None:
        hit_rate = _mean(_pick(by_name, "vllm:gpu_prefix_cache_hit_rate"))
    return {
        "kv_usage": kv_usage,
        "kv_used_tokens": used,
        "kv_capacity_tokens": capacity,
        "num_running": _int_or_none(_sum(_pick(by_name, "vllm:num_requests_running"))),
        "num_waiting": _int_or_none(_sum(_pick(by_name, "vllm:num_requests_waiting"))),
        "preemptions_total": _sum(_pick(by_name, "vllm:num_preemptions")),
        "prefix_queries_total": queries,
        "prefix_hits_total": hits,
        "prefix_hit_rate": hit_rate,
        "block_size": block_size,
        "num_gpu_blocks": num_gpu_blocks,
    }


def _sglang_fields(by_name: dict[str, Rows]) -> dict:
    used = _sum(_pick(by_name, "sglang:num_used_tokens"))
    capacity = _int_or_none(_sum(_pick(by_name, "sglang:max_total_num_tokens")))
    kv_usage = _ratio(used, capacity)
    if kv_usage is None:
        kv_usage = _mean(_pick(by_name, "sglang:token_usage"))
    if used is None and kv_usage is not None and capacity:
        used = kv_usage * capacity
    page_rows = _pick(by_name, "sglang:page_size")
    page = _int_or_none(page_rows[0][1]) if page_rows else None
    return {
        "kv_usage": kv_usage,
        "kv_used_tokens": used,
        "kv_capacity_tokens": capacity,
        "num_running": _int_or_none(_sum(_pick(by_name, "sglang:num_running_reqs"))),
        "num_waiting": _int_or_none(_sum(_pick(by_name, "sglang:num_queue_reqs"))),
        "prefix_hit_rate": _mean(_pick(by_name, "sglang:cache_hit_rate")),
        "block_size": page,
        "num_gpu_blocks": capacity // page if capacity and page else None,
    }
