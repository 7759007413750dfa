"""The nodes a Prometheus server knows, with their KV usage, via its HTTP API (/api/v1/query).

One instant query per metric; results are grouped by (instance, job). `up` lists every
scrape target, so a node that is down still appears (up=False, no KV numbers). `timeout_s` is
a deadline for the whole listing (all queries together), and the host must pass
KVVIZ_SCRAPE_ALLOW.
"""
from __future__ import annotations

import http.client as httplib
import json
import math
import time
import urllib.parse
from dataclasses import asdict, dataclass

from kvviz.errors import KvvizError
from kvviz.node import http
from kvviz.node.scrape import check_seconds
from kvviz.node.trust import ScrapeNotAllowedError

DEFAULT_TIMEOUT_S = 5.0
_MAX_BODY = 64 * 1024 * 1024

# PromQL -> (engine it reveals, what it measures). Usage metrics are fractions 0..1.
FLEET_QUERIES: dict[str, tuple[str, str]] = {
    "up": ("", "up"),
    "vllm:kv_cache_usage_perc": ("vllm", "kv_usage"),
    "vllm:gpu_cache_usage_perc": ("vllm", "kv_usage"),
    "sglang:token_usage": ("sglang", "kv_usage"),
    "kvviz_kv_used_tokens": ("kvviz", "kv_used_tokens"),
    "kvviz_kv_capacity_tokens": ("kvviz", "kv_capacity_tokens"),
    "kvviz_external_fragmentation": ("kvviz", "fragmentation"),
}


class FleetError(KvvizError):
    """The Prometheus server could not be queried, or answered with an error."""


@dataclass(frozen=True)
class FleetNode:
    instance: str  # host:port of the scrape target
    job: str
    engine: str  # "vllm" | "sglang" | "kvviz" | "unknown"
    up: bool | None  # None when the node has series but no `up` (federated, pushed)
    kv_usage: float | None = None  # 0..1; mean over the node's engines/models/lanes
    kv_used_tokens: float | None = None  # kvviz collectors only (sum over lanes)
    fragmentation: float | None = None  # external fragmentation index, worst lane (kvviz)
    series: int = 0  # KV series found for the node

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


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def list_nodes(prom_url: str, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> list[FleetNode]:
    """Every target Prometheus scrapes plus any node with KV series, sorted by job, instance."""
    up: dict[tuple[str, str], bool] = {}
    engines: dict[tuple[str, str], set[str]] = {}
    found: dict[tuple[str, str], dict[str, list[float]]] = {}
    _check_timeout(timeout_s)
    end = time.monotonic() + timeout_s
    for promql, (engine, what) in FLEET_QUERIES.items():
        left = end - time.monotonic()
        if left <= 0:
            raise FleetError(f"{prom_url}: listing not complete within {timeout_s:g}s")
        for labels, value in query(prom_url, promql, timeout_s=left):
            key = (labels.get("instance", ""), labels.get("job", ""))
            if what == "up":
                up[key] = up.get(key, False) or value == 1.0
                continue
            if not math.isfinite(value):
                continue
            engines.setdefault(key, set()).add(engine)
            found.setdefault(key, {}).setdefault(what, []).append(value)
    nodes = []
    for key in sorted(set(up) | set(found), key=lambda k: (k[1], k[0])):
        got = found.get(key, {})
        names = engines.get(key, set())
        engine = next((e for e in ("vllm", "sglang", "kvviz") if e in names), "unknown")
        usage = _mean(got.get("kv_usage", []))
        used = sum(got["kv_used_tokens"]) if got.get("kv_used_tokens") else None
        cap = sum(got["kv_capacity_tokens"]) if got.get("kv_capacity_tokens") else None
        if usage is None and used is not None and cap:
            usage = used / cap
        frag = max(got["fragmentation"]) if got.get("fragmentation") else None
        nodes.append(FleetNode(
            instance=key[0], job=key[1], engine=engine, up=up.get(key), kv_usage=usage,
            kv_used_tokens=used, fragmentation=frag, series=sum(len(v) for v in got.values()),
        ))
    return nodes
