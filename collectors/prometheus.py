"""Serve the collector's own metrics on /metrics for Prometheus (`kvviz collect --metrics-port`).

Each sample record the writer client hands to `collector.hooks` (on the engine thread, right after
the batch is sent) replaces the lane's latest values; a scrape reads them under a lock.
Per lane (label `lane`):

    kvviz_kv_used_tokens, kvviz_kv_free_tokens, kvviz_kv_capacity_tokens,
    kvviz_largest_hole_tokens, kvviz_external_fragmentation, kvviz_tail_waste_tokens  (gauges)
    kvviz_admission_failures_total{reason="capacity"|"fragmentation"|"policy"}, and
    kvviz_preemptions_total                                                          (counters)

The counters are the engine's cumulative counts (they continue across --loop restarts), so
they are exported as they are: a custom collector, not Counter.inc. The server has its own
registry (no process/GC metrics of the default one) and binds 127.0.0.1 unless told otherwise.
"""
from __future__ import annotations

import threading
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from kvviz.core.errors import KvvizError

# metric name -> (record key, help)
GAUGES = {
    "kvviz_kv_used_tokens": ("used_tokens", "KV slots written by live sequences"),
    "kvviz_kv_free_tokens": ("free_tokens", "KV slots no sequence holds"),
    "kvviz_kv_capacity_tokens": ("capacity_tokens", "KV slots in the lane's pool"),
    "kvviz_largest_hole_tokens": ("largest_hole_tokens", "longest run of adjacent free slots"),
    "kvviz_external_fragmentation": ("external_frag_index",
                                     "1 - largest hole / free slots (0: one hole)"),
    "kvviz_tail_waste_tokens": ("tail_waste_tokens",
                                "unwritten slots in sequences' last blocks"),
}
FAILURE_REASONS = ("capacity", "fragmentation", "policy")


class LaneMetrics:
    """prometheus_client custom collector over the latest record of each lane."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._latest: dict[str, dict] = {}

    def update(self, rec: dict) -> None:
        """A collector hook: called with every sample record (on the collector's engine thread)."""
        lane = str(rec["lane"])
        with self._lock:
            self._latest[lane] = dict(rec)

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            latest = {lane: dict(rec) for lane, rec in self._latest.items()}
        for name, (key, doc) in GAUGES.items():
            g = GaugeMetricFamily(name, doc, labels=["lane"])
            for lane, rec in latest.items():
                if rec.get(key) is not None:
                    g.add_metric([lane], float(rec[key]))
            yield g
        fails = CounterMetricFamily("kvviz_admission_failures",
                                    "admission failures by class since the start",
                                    labels=["lane", "reason"])
        pre = CounterMetricFamily("kvviz_preemptions",
                                  "running sequences evicted to make room since the start",
                                  labels=["lane"])
        for lane, rec in latest.items():
            for reason in FAILURE_REASONS:
                value = rec.get(f"admit_failures_{reason}")
                if value is not None:
                    fails.add_metric([lane, reason], float(value))
            if rec.get("preemptions") is not None:
                pre.add_metric([lane], float(rec["preemptions"]))
        yield fails
        yield pre


class Exporter:
    def __init__(self, port: int, address: str = "127.0.0.1") -> None:
        if not 0 <= port <= 65535:
            raise KvvizError(f"--metrics-port: must be 0..65535, got {port}")
        self.metrics = LaneMetrics()
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self.metrics)
        try:
            self.server, self.thread = start_http_server(port, addr=address,
                                                         registry=self.registry)
        except OSError as exc:
            raise KvvizError(f"--metrics-port {port}: cannot serve metrics on "
                             f"{address}:{port} ({exc.strerror or exc})") from None
        self.address = address
        self.port = int(self.server.server_address[1])  # the real one when port was 0

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def attach(collector, port: int, address: str = "127.0.0.1") -> Exporter:
    """Start serving /metrics and feed it from `collector.hooks`. Raises KvvizError when the
    address cannot be bound (port in use, unknown address)."""
    exporter = Exporter(port, address)
    collector.hooks.append(exporter.metrics.update)
    return exporter
