"""The serving-engine metrics kvviz reads, as data: name, engine, kind, how to combine, meaning.

A node exports one series per label set (model_name, engine index, dp/tp rank). `combine`
says how the label sets of one metric become one number for the node:
  sum   - counts that add up across engines (requests, counters, capacity)
  mean  - fractions (usage, hit rate), averaged; promtext weights usage by capacity when it can
  info  - value is always 1, the payload is in the labels (vLLM's cache_config_info)
Tensor-parallel ranks share one KV cache, so of each label set only the lowest tp_rank is read;
SGLang's attention-DP ranks (label dp_rank) each own a pool and are summed (kvviz.node.servers).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Engine = Literal["vllm", "sglang", "unknown"]
ENGINE_PREFIXES: dict[str, Engine] = {"vllm:": "vllm", "sglang:": "sglang"}


@dataclass(frozen=True)
class KnownMetric:
    name: str  # family name as exported, without a counter's _total suffix
    engine: Engine
    kind: Literal["gauge", "counter", "info"]
    combine: Literal["sum", "mean", "info"]
    feeds: str  # the NodeSample field (or intermediate) it fills
    meaning: str


KNOWN_METRICS: tuple[KnownMetric, ...] = (
    # vLLM (v1 engine; v0 names kept where they differ)
    KnownMetric("vllm:kv_cache_usage_perc", "vllm", "gauge", "mean", "kv_usage",
                "fraction of GPU KV-cache blocks in use, 0..1"),
    KnownMetric("vllm:gpu_cache_usage_perc", "vllm", "gauge", "mean", "kv_usage",
                "older name of kv_cache_usage_perc (v0 engine), 0..1"),
    KnownMetric("vllm:num_requests_running", "vllm", "gauge", "sum", "num_running",
                "requests in the running batch (their KV is resident)"),
    KnownMetric("vllm:num_requests_waiting", "vllm", "gauge", "sum", "num_waiting",
                "requests queued, not yet admitted (or preempted back to the queue)"),
    KnownMetric("vllm:num_preemptions", "vllm", "counter", "sum", "preemptions_total",
                "cumulative preemptions: running requests evicted because no free block"),
    KnownMetric("vllm:prefix_cache_queries", "vllm", "counter", "sum", "prefix_queries_total",
                "cumulative tokens looked up in the prefix cache"),
    KnownMetric("vllm:prefix_cache_hits", "vllm", "counter", "sum", "prefix_hits_total",
                "cumulative looked-up tokens found in the prefix cache"),
    KnownMetric("vllm:gpu_prefix_cache_queries", "vllm", "counter", "sum",
                "prefix_queries_total", "older name of prefix_cache_queries"),
    KnownMetric("vllm:gpu_prefix_cache_hits", "vllm", "counter", "sum", "prefix_hits_total",
                "older name of prefix_cache_hits"),
    KnownMetric("vllm:gpu_prefix_cache_hit_rate", "vllm", "gauge", "mean", "prefix_hit_rate",
                "v0 engine's own prefix-cache hit rate, 0..1; -1 means prefix caching is off"),
    KnownMetric("vllm:cache_config_info", "vllm", "info", "info", "block_size,num_gpu_blocks",
                "cache configuration in labels: block_size, num_gpu_blocks, cache_dtype, ..."),
    # SGLang
    KnownMetric("sglang:token_usage", "sglang", "gauge", "mean", "kv_usage",
                "fraction of KV token slots in use, 0..1"),
    KnownMetric("sglang:num_used_tokens", "sglang", "gauge", "sum", "kv_used_tokens",
                "KV token slots in use"),
    KnownMetric("sglang:max_total_num_tokens", "sglang", "gauge", "sum", "kv_capacity_tokens",
                "KV pool capacity in token slots"),
    KnownMetric("sglang:page_size", "sglang", "gauge", "info", "block_size",
                "token slots per KV page (SGLang's block size)"),
    KnownMetric("sglang:num_running_reqs", "sglang", "gauge", "sum", "num_running",
                "requests in the running batch"),
    KnownMetric("sglang:num_queue_reqs", "sglang", "gauge", "sum", "num_waiting",
                "requests waiting in the queue"),
    KnownMetric("sglang:cache_hit_rate", "sglang", "gauge", "mean", "prefix_hit_rate",
                "radix (prefix) cache hit rate, 0..1"),
    KnownMetric("sglang:num_retracted_requests", "sglang", "counter", "sum",
                "preemptions_total", "cumulative retractions: SGLang's preemptions (running "
                "requests sent back to the queue because the KV pool ran out)"),
    KnownMetric("sglang:num_retracted_reqs", "sglang", "gauge", "sum", "preempted_recent",
                "requests retracted since the scheduler's previous metrics report (reset "
                "after each report, so not a total)"),
    KnownMetric("sglang:swa_token_usage", "sglang", "gauge", "mean", "capacity_caveat",
                "sliding-window pool usage: present only for hybrid (SWA) models"),
    KnownMetric("sglang:mamba_usage", "sglang", "gauge", "mean", "capacity_caveat",
                "Mamba state pool usage: present only for hybrid (Mamba) models"),
)

BY_NAME: dict[str, KnownMetric] = {m.name: m for m in KNOWN_METRICS}


def engine_of_series(name: str) -> Engine:
    for prefix, engine in ENGINE_PREFIXES.items():
        if name.startswith(prefix):
            return engine
    return "unknown"


def name_variants(name: str) -> tuple[str, ...]:
    """A counter may be exported as `x_total` and parsed back as `x`, or the reverse."""
    if name.endswith("_total"):
        return (name, name[: -len("_total")])
    return (name, name + "_total")
