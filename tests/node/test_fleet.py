"""list_nodes against a fake Prometheus HTTP API on 127.0.0.1 serving JSON written here."""
from __future__ import annotations

import http.server
import json
import threading
import urllib.parse

import pytest

from kvviz.node.fleet import FLEET_QUERIES, FleetError, list_nodes, query


def vec(*items: tuple[dict, str]) -> dict:
    return {"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": m, "value": [1732000000.0, v]} for m, v in items]}}


V = {"instance": "gpu1:8000", "job": "vllm"}
S = {"instance": "gpu2:30000", "job": "sglang"}
K = {"instance": "localhost:9400", "job": "kvviz"}
DOWN = {"instance": "gpu3:8000", "job": "vllm"}
PROM = {"instance": "localhost:9090", "job": "prometheus"}

ANSWERS = {
    "up": vec(({"__name__": "up", **V}, "1"), ({"__name__": "up", **S}, "1"),
              ({"__name__": "up", **K}, "1"), ({"__name__": "up", **DOWN}, "0"),
              ({"__name__": "up", **PROM}, "1")),
    "vllm:kv_cache_usage_perc": vec(({**V, "engine": "0"}, "0.5"), ({**V, "engine": "1"}, "0.3")),
    "vllm:gpu_cache_usage_perc": vec(),
    "vllm:cache_config_info": vec(  # engine 1 holds three times the blocks of engine 0
        ({**V, "engine": "0", "block_size": "16", "num_gpu_blocks": "1000"}, "1"),
        ({**V, "engine": "1", "block_size": "16", "num_gpu_blocks": "3000"}, "1")),
    "sglang:token_usage": vec(({**S, "model_name": "q"}, "0.28")),
    "sglang:num_used_tokens": vec(),
    "sglang:max_total_num_tokens": vec(),
    "kvviz_kv_used_tokens": vec(({**K, "lane": "paged"}, "300"), ({**K, "lane": "contig"}, "500")),
    "kvviz_kv_capacity_tokens": vec(({**K, "lane": "paged"}, "1000"),
                                    ({**K, "lane": "contig"}, "1000")),
    "kvviz_external_fragmentation": vec(({**K, "lane": "paged"}, "0"),
                                        ({**K, "lane": "contig"}, "0.62")),
}


class FakePrometheus:
    def __init__(self, answers: dict[str, object], raw: bytes | None = None) -> None:
        self.queries: list[str] = []
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                parts = urllib.parse.urlsplit(self.path)
                q = urllib.parse.parse_qs(parts.query).get("query", [""])[0]
                fake.queries.append(q)
                code = 200
                if raw is not None:
                    body = raw
                elif parts.path != "/api/v1/query":
                    code, body = 404, b"not found"
                elif q in answers:
                    body = json.dumps(answers[q]).encode()
                else:
                    code = 400
                    body = json.dumps({"status": "error", "errorType": "bad_data",
                                       "error": f"unknown query {q}"}).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture()
def prom():
    p = FakePrometheus(ANSWERS)
    yield p
    p.close()


def test_lists_every_target_with_engine_and_usage(prom):
    nodes = {n.instance: n for n in list_nodes(prom.url)}
    assert set(nodes) == {"gpu1:8000", "gpu2:30000", "localhost:9400", "gpu3:8000",
                          "localhost:9090"}
    v, s, k = nodes["gpu1:8000"], nodes["gpu2:30000"], nodes["localhost:9400"]
    # capacity-weighted, as the Node page computes it: (0.5 x 16k + 0.3 x 48k) / 64k
    # capacity-weighted over the pools as vLLM counts them: each pool keeps its null block back
    used = (0.5 * 999 + 0.3 * 2999) * 16
    assert (v.engine, v.up, v.kv_usage) == ("vllm", True, pytest.approx(used / (3998 * 16)))
    assert v.usage_basis == "capacity-weighted over 2 pools"
    assert (v.kv_used_tokens, v.kv_capacity_tokens) == (pytest.approx(used), 3998 * 16)
    assert s.usage_basis == "one pool" and s.kv_capacity_tokens is None
    assert (s.engine, s.kv_usage, s.fragmentation) == ("sglang", pytest.approx(0.28), None)
    assert k.engine == "kvviz" and k.kv_used_tokens == 800
    assert k.kv_usage == pytest.approx(0.4) and k.fragmentation == pytest.approx(0.62)
    assert set(prom.queries) == set(FLEET_QUERIES)


def test_down_node_is_listed_without_kv_numbers(prom):
    down = next(n for n in list_nodes(prom.url) if n.instance == "gpu3:8000")
    assert down.up is False and down.kv_usage is None and down.engine == "unknown"


def test_sorted_by_job_then_instance(prom):
    keys = [(n.job, n.instance) for n in list_nodes(prom.url)]
    assert keys == sorted(keys)


def test_query_error_names_prometheus_message(prom):
    with pytest.raises(FleetError, match="bad_data: unknown query nope"):
        query(prom.url, "nope")


def test_unreachable_prometheus_raises(closed_port_url):
    with pytest.raises(FleetError, match="cannot reach Prometheus"):
        list_nodes(closed_port_url.removesuffix("/metrics"), timeout_s=1)


@pytest.mark.parametrize("raw, why", [(b"<html>", "not JSON"),
                                      (b'{"status": "success", "data": {}}', "instant vector")])
def test_malformed_answers_raise(raw, why):
    p = FakePrometheus({}, raw=raw)
    try:
        with pytest.raises(FleetError, match=why):
            query(p.url, "up")
    finally:
        p.close()


def test_non_http_url_refused():
    with pytest.raises(FleetError, match="not an http"):
        query("file:///etc", "up")


def test_fleet_and_node_page_give_one_node_one_usage(prom):
    """The same series, scraped by the Node page and read through Prometheus: one number."""
    from kvviz.node.scrape import sample_from_text

    text = "\n".join([
        "# TYPE vllm:kv_cache_usage_perc gauge",
        'vllm:kv_cache_usage_perc{engine="0"} 0.5',
        'vllm:kv_cache_usage_perc{engine="1"} 0.3',
        "# TYPE vllm:cache_config_info gauge",
        'vllm:cache_config_info{engine="0",block_size="16",num_gpu_blocks="1000"} 1',
        'vllm:cache_config_info{engine="1",block_size="16",num_gpu_blocks="3000"} 1', ""])
    node = sample_from_text(text, url="http://gpu1:8000/metrics", time=0.0)
    fleet = next(n for n in list_nodes(prom.url) if n.instance == "gpu1:8000")
    assert node.kv_usage == pytest.approx(fleet.kv_usage)
    assert node.kv_usage != pytest.approx((0.5 + 0.3) / 2)  # not the plain mean of pools
