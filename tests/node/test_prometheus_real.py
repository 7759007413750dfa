"""The collector's /metrics exporter: unit checks, then a REAL Prometheus scraping a collector."""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from collectors.prometheus import attach
from kvviz.core.errors import KvvizError
from kvviz.node.fleet import list_nodes

PROMETHEUS = "/usr/bin/prometheus"
ROOT = Path(__file__).resolve().parents[2]
LANES = ("contiguous:first-fit:max", "paged:16")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class FakeCollector:
    def __init__(self) -> None:
        self.hooks: list = []


def record(lane: str, used: int, failures: int) -> dict:
    return {"lane": lane, "t": 1.0, "used_tokens": used, "free_tokens": 1000 - used,
            "capacity_tokens": 1000, "largest_hole_tokens": 100, "external_frag_index": 0.5,
            "tail_waste_tokens": 7, "preemptions": 2, "admit_failures_capacity": failures,
            "admit_failures_fragmentation": 2 * failures, "admit_failures_policy": 0}


def scrape(port: int) -> dict[tuple[str, tuple], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def test_exporter_serves_latest_lane_values_and_cumulative_counters():
    col = FakeCollector()
    exp = attach(col, 0)
    try:
        assert exp.address == "127.0.0.1" and len(col.hooks) == 1
        col.hooks[0](record("paged:16", 300, 4))
        col.hooks[0](record("paged:16", 400, 5))  # the latest record wins; counters as given
        got = scrape(exp.port)
        assert got[("kvviz_kv_used_tokens", (("lane", "paged:16"),))] == 400
        assert got[("kvviz_kv_free_tokens", (("lane", "paged:16"),))] == 600
        assert got[("kvviz_external_fragmentation", (("lane", "paged:16"),))] == 0.5
        assert got[("kvviz_admission_failures_total",
                    (("lane", "paged:16"), ("reason", "fragmentation")))] == 10
        assert got[("kvviz_preemptions_total", (("lane", "paged:16"),))] == 2
        assert not any(name.startswith("process_") for name, _ in got)  # own registry
    finally:
        exp.close()


def test_port_in_use_is_a_clear_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        with pytest.raises(KvvizError, match="cannot serve metrics"):
            attach(FakeCollector(), s.getsockname()[1])


def prom_get(base: str, path: str, **params: str) -> dict:
    url = f"{base}{path}?" + urllib.parse.urlencode(params)
    with urllib.request.urlopen(url, timeout=5) as resp:
        return json.loads(resp.read())


def wait_for_lanes(base: str, deadline: float) -> dict[str, float]:
    last = ""
    while time.monotonic() < deadline:
        try:
            doc = prom_get(base, "/api/v1/query", query="kvviz_kv_used_tokens")
            found = {r["metric"].get("lane"): float(r["value"][1]) for r in doc["data"]["result"]}
            if set(LANES) <= set(found):
                return found
            last = f"lanes so far: {sorted(found)}"
        except OSError as exc:
            last = f"Prometheus not answering yet ({exc})"
        time.sleep(0.5)
    raise AssertionError(f"Prometheus never saw both lanes: {last}")


def stop(proc: subprocess.Popen | None) -> None:
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


@pytest.mark.skipif(not os.access(PROMETHEUS, os.X_OK),
                    reason=f"{PROMETHEUS} is missing (scripts/test.sh installs the Debian "
                           "package `prometheus`)")
def test_real_prometheus_scrapes_the_collector_and_fleet_lists_it(tmp_path):
    mport, pport = free_port(), free_port()
    (tmp_path / "prom.yml").write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        "scrape_configs:\n  - job_name: kvviz\n    static_configs:\n"
        f"      - targets: ['127.0.0.1:{mport}']\n")
    collector = prom = None
    logs = [open(tmp_path / n, "wb") for n in ("collector.log", "prometheus.log")]
    try:
        collector = subprocess.Popen(
            [sys.executable, "-m", "collectors", "--mode", "sim", "--metrics-port", str(mport),
             "--duration", "30", "--quiet", "--out", str(tmp_path / "run.db"),
             "--rate", "40", "--capacity-tokens", "8192"],
            cwd=ROOT, stdout=logs[0], stderr=subprocess.STDOUT)
        prom = subprocess.Popen(
            [PROMETHEUS, f"--config.file={tmp_path / 'prom.yml'}",
             f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{pport}"],
            cwd=tmp_path, stdout=logs[1], stderr=subprocess.STDOUT)
        base = f"http://127.0.0.1:{pport}"
        used = wait_for_lanes(base, time.monotonic() + 38)
        cap = {r["metric"]["lane"]: float(r["value"][1]) for r in prom_get(
            base, "/api/v1/query", query="kvviz_kv_capacity_tokens")["data"]["result"]}
        for lane in LANES:
            assert 0 <= used[lane] <= cap[lane] == 8192
        time.sleep(3)  # a few more scrapes for the counter's history
        doc = prom_get(base, "/api/v1/query", query="kvviz_admission_failures_total[60s]")
        series = doc["data"]["result"]
        assert {(s["metric"]["lane"], s["metric"]["reason"]) for s in series} >= {
            (lane, r) for lane in LANES for r in ("capacity", "fragmentation", "policy")}
        for s in series:
            values = [float(v) for _, v in s["values"]]
            assert values == sorted(values), s["metric"]

        nodes = list_nodes(base)
        mine = [n for n in nodes if n.instance == f"127.0.0.1:{mport}"]
        assert len(mine) == 1, nodes
        node = mine[0]
        assert node.job == "kvviz" and node.engine == "kvviz" and node.up is True
        assert node.kv_usage is not None and 0 <= node.kv_usage <= 1
        assert node.fragmentation is not None and 0 <= node.fragmentation <= 1
    except AssertionError:
        for f in logs:
            f.flush()
        print((tmp_path / "collector.log").read_text()[-2000:])
        print((tmp_path / "prometheus.log").read_text()[-2000:])
        raise
    finally:
        stop(collector)
        stop(prom)
        for f in logs:
            f.close()
        shutil.rmtree(tmp_path / "tsdb", ignore_errors=True)
