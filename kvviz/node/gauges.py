"""Gauges checked as they are read: a value outside its meaning is the node's error, not data.

A usage or hit rate is a fraction in 0..1 (the v0 hit rate may be -1: prefix caching off);
counts, counters, capacities, block sizes and num_gpu_blocks are finite and >= 0. A row
outside that is dropped before promtext turns the series into a NodeSample (so it is never
drawn, summed or weighted), and named in the sample's message: "the node reported ...".
A series given twice (the same name and labels, or vLLM's cache_config_info twice for one
engine) is read once, its first row, with one warning naming it: never a mix of both.

`percent` formats a fraction for a display, refusing what is not one (a stored -7.5 reads
"invalid (-7.5)", never "-750.0%"; 1e308 never "inf%").
"""
from __future__ import annotations

import math

from kvviz.node.known_metrics import KNOWN_METRICS, name_variants

Labels = dict[str, str]
Series = list[tuple[str, Labels, float]]
INT64_MAX = 2**63 - 1
MAX_NAMED = 3  # problems named in a message (all are counted)
# the config labels vLLM's cache_config_info carries as numbers
INFO_COUNTS = ("block_size", "num_gpu_blocks", "num_cpu_blocks")
INFO_IDENTITY = ("engine", "tp_rank", "dp_rank", "model_name")


def _ranges() -> dict[str, tuple[float, float]]:
    out: dict[str, tuple[float, float]] = {}
    for m in KNOWN_METRICS:
        if m.kind == "info":
            continue
        if m.combine == "mean":
            lo = -1.0 if m.name == "vllm:gpu_prefix_cache_hit_rate" else 0.0
            rng = (lo, 1.0)
        else:
            rng = (0.0, float(INT64_MAX))
        for v in name_variants(m.name):
            out[v] = rng
    out["vllm:cpu_cache_usage_perc"] = (0.0, 1.0)
    return out


RANGES = _ranges()


def _shown(name: str, labels: Labels) -> str:
    body = ",".join(f'{k}="{v[:40]}"' for k, v in sorted(labels.items())[:4])
    return f"{name}{{{body}}}" if labels else name


def _info_problem(labels: Labels) -> str | None:
    for key in INFO_COUNTS:
        text = labels.get(key)
        if text is None or text.strip().lower() in ("", "none", "null"):
            continue
        try:
            v = float(text)
        except ValueError:
            return f"{key}={text[:40]!r} is not a number"
        if not math.isfinite(v) or v < (1 if key == "block_size" else 0) or v > INT64_MAX:
            return f"{key}={text[:40]} is not a {'block size' if key == 'block_size' else 'count'}"
    return None


def check(series: Series) -> tuple[Series, list[str]]:
    """(the rows to read, what was wrong): rows outside their meaning and second copies of a
    series dropped, each named once."""
    kept: Series = []
    problems: list[str] = []
    seen: set[tuple] = set()
    dup: dict[str, int] = {}
    for name, labels, value in series:
        if name == "vllm:cache_config_info":
            key = (name, tuple(labels.get(k, "") for k in INFO_IDENTITY))
        else:
            key = (name, tuple(sorted(labels.items())))
        if key in seen:
            dup[_shown(name, {k: v for k, v in labels.items() if k in INFO_IDENTITY}
                       if name == "vllm:cache_config_info" else labels)] = 1
            continue
        seen.add(key)
        if name == "vllm:cache_config_info":
            why = _info_problem(labels)
            if why:
                problems.append(f"{_shown(name, {})} {why}")
                continue
        rng = RANGES.get(name)
        if rng is not None and not (math.isfinite(value) and rng[0] <= value <= rng[1]):
            what = "a fraction 0..1" if rng[1] == 1.0 else "a count >= 0"
            problems.append(f"{_shown(name, labels)} = {value!r:.24} is not {what}")
            continue
        kept.append((name, labels, value))
    for shown in dup:
        problems.append(f"{shown} is given more than once: the first is read")
    return kept, problems


def message(problems: list[str]) -> str:
    """One line for NodeSample.message: the node's error, first problems named."""
    if not problems:
        return ""
    more = f" (and {len(problems) - MAX_NAMED} more)" if len(problems) > MAX_NAMED else ""
    return ("the node reported values outside their meaning, not shown as data: "
            + "; ".join(problems[:MAX_NAMED]) + more)


def percent(x: float | None, spec: str = ".1f", none: str = "-") -> str:
    """A fraction 0..1 as a percentage; `none` for None; "invalid (x)" for anything else."""
    if x is None:
        return none
    if not (isinstance(x, (int, float)) and math.isfinite(x) and 0.0 <= x <= 1.0):
        return f"invalid ({x!r:.12})"
    return f"{format(100 * x, spec)}%"
