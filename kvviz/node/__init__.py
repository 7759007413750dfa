"""Debug a real serving node: scrape its Prometheus /metrics (vLLM, SGLang) into NodeSamples,
and list the nodes a Prometheus server knows. Stdlib + prometheus_client; no torch, no numpy.
"""
from __future__ import annotations

from kvviz.node.fleet import FleetError, FleetNode, list_nodes
from kvviz.node.promtext import (
    GarbledMetricsError,
    NodeSample,
    NodeStatus,
    pool_rows,
    sample_from_text,
)
from kvviz.node.scrape import (
    JsonlSink,
    NodeUrlError,
    Scraper,
    normalize_url,
    read_jsonl,
    scrape_once,
    with_rates,
)
from kvviz.node.servers import PoolRow
from kvviz.node.trust import ScrapeAllow, ScrapeNotAllowedError

__all__ = [
    "FleetError", "FleetNode", "GarbledMetricsError", "JsonlSink", "NodeSample", "NodeStatus",
    "NodeUrlError", "PoolRow", "ScrapeAllow", "ScrapeNotAllowedError", "Scraper", "list_nodes",
    "normalize_url", "pool_rows", "read_jsonl", "sample_from_text", "scrape_once", "with_rates",
]
