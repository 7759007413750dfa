"""The node's own scheduler settings, from vLLM's `/server_info?config_format=json` (served
when the node runs with VLLM_SERVER_DEV_MODE=1): what `kvviz attach` keeps as meta
`node_config` so the Node page can name a binding limit from the node's config rather than
guess it from gauges. Untrusted: the answer is capped, time-boxed and read field by field;
anything missing or of the wrong type is left out. Standard library only."""
from __future__ import annotations

import json
import urllib.parse

from kvviz.node import http

MAX_BYTES = 4 << 20  # vLLM's answer is ~10-40 KB (its config and environment)
# (section, key) of vLLM's VllmConfig -> the name kept, and its type
FIELDS = {("scheduler_config", "max_num_seqs"): ("max_num_seqs", int),
          ("scheduler_config", "max_num_batched_tokens"): ("max_num_batched_tokens", int),
          ("scheduler_config", "enable_chunked_prefill"): ("enable_chunked_prefill", bool),
          ("cache_config", "block_size"): ("block_size", int),
          ("cache_config", "enable_prefix_caching"): ("enable_prefix_caching", bool),
          ("cache_config", "num_gpu_blocks"): ("num_gpu_blocks", int),
          ("model_config", "max_model_len"): ("max_model_len", int)}


def info_url(metrics_url: str) -> str:
    """The /server_info URL of the node whose metrics are at `metrics_url`."""
    parts = urllib.parse.urlsplit(metrics_url)
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, "/server_info",
                                    "config_format=json", ""))


def parse(body: bytes) -> dict | None:
    """The kept fields of a /server_info answer, or None when it holds none of them."""
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):
        return None
    cfg = doc.get("vllm_config") if isinstance(doc, dict) else None
    if not isinstance(cfg, dict):
        return None
    out: dict = {}
    for (section, key), (name, kind) in FIELDS.items():
        part = cfg.get(section)
        v = part.get(key) if isinstance(part, dict) else None
        if kind is bool and isinstance(v, bool):
            out[name] = v
        elif kind is int and isinstance(v, int) and not isinstance(v, bool) and 0 < v < 2**62:
            out[name] = v
    return {**out, "source": "/server_info"} if out else None


def fetch(metrics_url: str, timeout_s: float) -> dict | None:
    """The node's settings, or None when it does not serve them (no dev mode, not vLLM, slow,
    too large, not allowed): attach records without them."""
    try:
        ans = http.get(info_url(metrics_url), timeout_s=timeout_s, max_bytes=MAX_BYTES,
                       accept="application/json")
    except Exception:  # noqa: BLE001 - optional: any failure means "not known"
        return None
    return parse(ans.body) if ans.status == 200 else None
