"""The nodes a Prometheus server knows, with their KV usage, via its HTTP API (/api/v1/query).

One instant query per metric; results are grouped by (instance, job). `up` lists every
scrape target, so a node that is down still appears (up=False, no KV numbers). A node's KV
usage is computed by the Node page's own code (kvviz.node.servers: vllm_pools / sglang_pools
and node_usage, capacity-weighted over pools), from the same series Prometheus scraped from
it. `timeout_s` is a deadline for the whole listing (all queries together), and the host must
pass KVVIZ_SCRAPE_ALLOW.
"""
from __future__ import annotations

import http.client as httplib
import json
import math
import time
import urllib.parse
from dataclasses import asdict, dataclass

from kvviz.core.errors import KvvizError
from kvviz.node import http
from kvviz.node.scrape import check_seconds
from kvviz.node.servers import node_usage, sglang_pools, usage_basis, vllm_pools
from kvviz.node.trust import ScrapeNotAllowedError

DEFAULT_TIMEOUT_S = 5.0
_MAX_BODY = 64 * 1024 * 1024

# PromQL (a metric name) -> the engine it reveals. vLLM's and SGLang's are what
# kvviz.node.servers reads for a node's pools (usage, capacity, used slots).
FLEET_QUERIES: dict[str, str] = {
    "up": "",
    "vllm:kv_cache_usage_perc": "vllm",
    "vllm:gpu_cache_usage_perc": "vllm",
    "vllm:cache_config_info": "vllm",
    "sglang:token_usage": "sglang",
    "sglang:num_used_tokens": "sglang",
    "sglang:max_total_num_tokens": "sglang",
    "kvviz_kv_used_tokens": "kvviz",
    "kvviz_kv_capacity_tokens": "kvviz",
    "kvviz_external_fragmentation": "kvviz",
}
USAGE_METRICS = {"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage",
                 "sglang:num_used_tokens", "kvviz_kv_used_tokens"}


class FleetError(KvvizError):
    """The Prometheus server could not be queried, or answered with an error."""


@dataclass(frozen=True)
class FleetNode:
    instance: str  # host:port of the scrape target
    job: str
    engine: str  # "vllm" | "sglang" | "kvviz" | "unknown"
    up: bool | None  # None when the node has series but no `up` (federated, pushed)
    kv_usage: float | None = None  # 0..1; engines.node_usage: capacity-weighted over pools
    kv_used_tokens: float | None = None  # slots in use, summed over pools (where known)
    fragmentation: float | None = None  # external fragmentation index, worst lane (kvviz)
    series: int = 0  # KV series found for the node
    kv_capacity_tokens: float | None = None  # summed over pools (where known)
    usage_basis: str = ""  # how kv_usage was computed (engines.usage_basis)

    def to_dict(self) -> dict:
        return asdict(self)


def query(prom_url: str, promql: str, *, timeout_s: float = DEFAULT_TIMEOUT_S,
          ) -> list[tuple[dict[str, str], float]]:
    """Instant vector query -> [(labels, value)]. NaN stays NaN. Raises FleetError."""
    base = prom_url.strip()
    if "://" not in base:
        base = "http://" + base
    base = base.rstrip("/")  # after the scheme: "http://" stays a URL with no host
    try:
        parts = urllib.parse.urlsplit(base)
        parts.port  # noqa: B018 (raises ValueError for a port that is not 0..65535)
    except ValueError as exc:
        raise FleetError(f"{prom_url!r}: not a URL ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname or any(
            not c.isprintable() or c.isspace() for c in parts.netloc):
        raise FleetError(f"{prom_url!r}: not an http(s) Prometheus server URL")
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    _check_timeout(timeout_s)
    try:
        answer = http.get(url, timeout_s=timeout_s, max_bytes=_MAX_BODY,
                          accept="application/json")
    except TimeoutError as exc:
        raise FleetError(f"{base}: no complete answer to {promql!r} within "
                         f"{timeout_s:.3g}s") from exc
    except http.BodyTooLargeError as exc:
        raise FleetError(f"{base}: answer to {promql!r} larger than {_MAX_BODY} bytes") from exc
    except ScrapeNotAllowedError as exc:
        raise FleetError(f"{base}: {exc}") from exc
    except (OSError, httplib.HTTPException, ValueError) as exc:
        raise FleetError(f"{base}: cannot reach Prometheus ({exc})") from exc
    body = answer.body  # Prometheus sends its error JSON with 400/422/503 too
    if not 200 <= answer.status < 300 and not body:
        raise FleetError(f"{base}: HTTP {answer.status} for query {promql!r}")
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise FleetError(f"{base}: answer to {promql!r} is not JSON "
                         f"({type(exc).__name__})") from exc
    return _vector(doc, base, promql)


def _check_timeout(timeout_s: float) -> None:
    try:
        check_seconds("fleet timeout", timeout_s)
    except KvvizError as exc:
        raise FleetError(str(exc)) from None


def _vector(doc: object, base: str, promql: str) -> list[tuple[dict[str, str], float]]:
    if not isinstance(doc, dict):
        raise FleetError(f"{base}: answer to {promql!r} is not a Prometheus API object")
    if doc.get("status") != "success":
        raise FleetError(f"{base}: query {promql!r} failed: "
                         f"{doc.get('errorType', '?')}: {doc.get('error', 'no message')}")
    data = doc.get("data")
    if not isinstance(data, dict) or data.get("resultType") != "vector":
        raise FleetError(f"{base}: query {promql!r} did not return an instant vector")
    out = []
    for item in data.get("result") or []:
        try:
            labels = {str(k): str(v) for k, v in item["metric"].items()}
            out.append((labels, float(item["value"][1])))
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
            raise FleetError(f"{base}: malformed result for {promql!r}: {item!r:.120}") from exc
    return out


def _kv_numbers(engine: str, by_name: dict[str, list]) -> dict:
    """kv_usage, kv_used_tokens, kv_capacity_tokens, usage_basis of one node's series."""
    if engine in ("vllm", "sglang"):
        pools = vllm_pools(by_name) if engine == "vllm" else sglang_pools(by_name)
        caps = [p.capacity_tokens for p in pools if p.usage is not None]
        used = [p.used_tokens for p in pools if p.usage is not None]
        known = bool(caps) and all(c for c in caps)
        return {"kv_usage": node_usage(pools), "usage_basis": usage_basis(pools),
                "kv_capacity_tokens": float(sum(caps)) if known else None,
                "kv_used_tokens": float(sum(used)) if known and None not in used else None}
    if engine == "kvviz":
        used = [v for _, v in by_name.get("kvviz_kv_used_tokens", [])]
        cap = [v for _, v in by_name.get("kvviz_kv_capacity_tokens", [])]
        usage = sum(used) / sum(cap) if used and cap and sum(cap) > 0 else None
        return {"kv_usage": usage, "kv_used_tokens": float(sum(used)) if used else None,
                "kv_capacity_tokens": float(sum(cap)) if cap else None,
                "usage_basis": (f"used / capacity over {len(cap)} lane"
                                + ("s" if len(cap) != 1 else "")) if usage is not None
                else "no kvviz capacity series"}
    return {}


def list_nodes(prom_url: str, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> list[FleetNode]:
    """Every target Prometheus scrapes plus any node with KV series, sorted by job, instance."""
    up: dict[tuple[str, str], bool] = {}
    engines: dict[tuple[str, str], set[str]] = {}
    found: dict[tuple[str, str], dict[str, list]] = {}
    _check_timeout(timeout_s)
    end = time.monotonic() + timeout_s
    for promql, engine in FLEET_QUERIES.items():
        left = end - time.monotonic()
        if left <= 0:
            raise FleetError(f"{prom_url}: listing not complete within {timeout_s:g}s")
        for labels, value in query(prom_url, promql, timeout_s=left):
            key = (labels.get("instance", ""), labels.get("job", ""))
            if promql == "up":
                up[key] = up.get(key, False) or value == 1.0
                continue
            if not math.isfinite(value):
                continue
            if promql in USAGE_METRICS:
                engines.setdefault(key, set()).add(engine)
            found.setdefault(key, {}).setdefault(promql, []).append((labels, value))
    nodes = []
    for key in sorted(set(up) | set(found), key=lambda k: (k[1], k[0])):
        got = found.get(key, {})
        names = engines.get(key, set())
        engine = next((e for e in ("vllm", "sglang", "kvviz") if e in names), "unknown")
        frag = [v for _, v in got.get("kvviz_external_fragmentation", [])]
        nodes.append(FleetNode(
            instance=key[0], job=key[1], engine=engine, up=up.get(key),
            fragmentation=max(frag) if frag else None,
            series=sum(len(v) for v in got.values()), **_kv_numbers(engine, got),
        ))
    return nodes
