"""The node's settings as an attach recording's run.meta holds them (`engine`, and the
plugin's pool under `blocks`: docs/FORMAT.md), checked, with what the rule cannot match
named (another scheduler class, another vLLM version, several ranks)."""
from __future__ import annotations

import math

from kvviz.core.errors import KvvizError
from kvviz.twin.settings import NodeSettings

RULE_VERSION = "0.32."


def meta_lane(meta: dict, where: str) -> tuple[str, dict, list[str]]:
    blocks = meta.get("blocks")
    if not isinstance(blocks, dict) or not blocks:
        raise KvvizError(f"{where}: run metadata has no 'blocks' entry (the plugin's pool): "
                         "not a kvviz attach --blocks recording")
    name = "vllm" if "vllm" in blocks else sorted(blocks)[0]
    pool = blocks[name].get("pool") if isinstance(blocks[name], dict) else None
    if not isinstance(pool, dict):
        raise KvvizError(f"{where}: run metadata blocks.{name!s:.40} has no pool geometry")
    notes = [] if len(blocks) == 1 else [f"the recording holds {len(blocks)} data-parallel "
                                         f"ranks; this replays lane {name} alone"]
    return name, pool, notes


def _field(d: dict, key: str, kind: type, where: str, lo: float = 0, hi: float = 2**62):
    v = d.get(key)
    ok = isinstance(v, kind) and not (kind is not bool and isinstance(v, bool))
    if kind is float:
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    if not ok or (kind is not bool and not lo <= v <= hi):
        raise KvvizError(f"{where}: the node's setting {key} is {v!r:.40}, not a "
                         f"{kind.__name__} in {lo:g}..{hi:g}")
    return v


def from_meta(meta: dict, pool: dict, where: str) -> tuple[NodeSettings, int, list[str]]:
    """(the node's settings, its max_model_len, notes) from run.meta's engine and pool."""
    eng = meta.get("engine")
    if not isinstance(eng, dict):
        raise KvvizError(f"{where}: run metadata has no 'engine' (the node's scheduler "
                         "settings)")
    if not isinstance(pool.get("prefix_caching"), bool):
        raise KvvizError(f"{where}: the recording does not say whether the node had prefix "
                         "caching on (meta blocks pool prefix_caching)")
    w = f"{where}: run metadata"
    try:
        s = NodeSettings(_field(pool, "block_size", int, w, 1), _field(pool, "num_blocks", int, w),
                         _field(eng, "max_num_seqs", int, w, 1),
                         _field(eng, "max_num_batched_tokens", int, w, 1),
                         _field(eng, "enable_chunked_prefill", bool, w),
                         float(_field(eng, "watermark", float, w, 0, 1)),
                         pool["prefix_caching"])
    except ValueError as exc:
        raise KvvizError(f"{where}: the node's settings are outside what kvviz replays ({exc})"
                         ) from None
    max_len = _field(eng, "max_model_len", int, w, 2)
    try:  # the scheduler's own checks at the node's max_model_len (vLLM makes them too)
        s.engine(1000.0, max_len)
    except ValueError as exc:
        raise KvvizError(f"{where}: the node's settings are outside what kvviz replays ({exc}, "
                         f"max_model_len {max_len})") from None
    notes = []
    sched = pool.get("scheduler", "Scheduler")
    if sched != "Scheduler":
        notes.append(f"the node ran vLLM's {sched!s:.60} (async scheduling or a custom class); "
                     "the rule is the synchronous Scheduler's, so its steps may not match")
    version = pool.get("version", "")
    if not str(version).startswith(RULE_VERSION):
        notes.append(f"the node ran vLLM {version!s:.40}; the rule is vLLM 0.32's")
    return s, max_len, notes
