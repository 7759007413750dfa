"""Node page: node recordings, a scrape started from the page, the fleet table, and snapshot
import through the safe loader (AppTest cannot upload: the `uploads` fixture stands in)."""
from __future__ import annotations

import http.server
import json
import os
import pickle
import re
import socket
import threading
import urllib.parse
from pathlib import Path

import pytest

from kvviz.runs import directory, process
from kvviz.store.reader import RunReader
from kvviz.store.writer import RunWriter
from tests.node.fakes import FakeNode
from tests.pages.pagehelpers import (
    decode,
    figures,
    heatmaps,
    no_exception,
    page,
    rerun_until,
    tiles,
)
from tests.torchsnap.snaps import dumps, make_snapshot

PAGE = "pages/node.py"
SNAP = "torch.cuda.memory._snapshot()"  # the snapshot uploader's label


@pytest.fixture
def node_runs(runs: Path):
    yield runs
    process.stop_all()


@pytest.fixture
def closed_port_url() -> str:
    """A URL on 127.0.0.1 where nothing listens."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/metrics"


@pytest.fixture
def fake_node():
    node = FakeNode()
    node.thread.start()
    yield node
    node.server.shutdown()
    node.server.server_close()


def write_node_run(path: Path, statuses: list[str], gpu: bool = False) -> None:
    w = RunWriter(path, {"mode": "node", "url": "http://n:8000/metrics", "lanes": []})
    for i, status in enumerate(statuses):
        ok = status == "ok"
        rec = {"time": 1e9 + i, "url": "http://n:8000/metrics", "status": status,
               "message": "" if ok else "ConnectionRefusedError: refused", "engine": "vllm"}
        if ok:
            rec.update(kv_usage=0.1 * i, num_running=i, num_waiting=1, block_size=16,
                       num_gpu_blocks=1000, kv_capacity_tokens=16000,
                       preemptions_per_s=0.5, prefix_hit_rate=0.25)
        w.add_node_sample(float(i), rec, {})
        if gpu:
            w.add_device_memory(float(i), {"device_index": 0, "nvml_status": "ok",
                                           "nvml_reason": "", "nvml_total_bytes": 80 * 2**30,
                                           "nvml_used_bytes": (40 + i) * 2**30})
    w.close()


def errors(at) -> str:
    return " ".join(e.value for e in at.error)


def test_no_node_recording_yet(node_runs):
    at = page(PAGE)
    no_exception(at)
    assert "No node recording yet" in " ".join(i.value for i in at.info)
    assert not at.error and not at.get("plotly_chart")


def test_engine_recordings_are_not_listed_and_a_node_recording_is_drawn(node_runs):
    write_node_run(node_runs / "node-a.db", ["ok", "ok", "ok", "unreachable", "ok"], gpu=True)
    at = page(PAGE)
    no_exception(at)
    assert at.selectbox(key="node_pick").options == ["node-a.db"]  # rec.db is an engine run
    values = tiles(at)
    assert values["KV usage"] == "40.0%" and values["KV capacity (blocks)"] == "1,000"
    assert values["KV capacity (tokens)"] == "16,000" and values["Preemptions/s"] == "0.50"
    assert any("Last scrape: **ok**" in s.value for s in at.success)
    names = {tr.get("name") for f in figures(at) for tr in f["data"]}
    assert {"KV usage %", "running", "waiting", "preemptions/s", "unreachable",
            "device used"} <= names


def test_failing_node_shows_its_status_and_reason(node_runs):
    write_node_run(node_runs / "node-down.db", ["ok", "timeout", "unreachable"])
    at = page(PAGE)
    no_exception(at)
    warn = " ".join(w.value for w in at.warning)
    assert "**unreachable**" in warn and "refused" in warn
    assert "NVML" in " ".join(c.value for c in at.caption)


def test_scrape_started_from_the_page_records_the_node(node_runs, fake_node):
    at = page(PAGE)
    at.text_input(key="node_url").input(fake_node.url("/metrics"))
    at.number_input(key="node_every").set_value(0.5)
    at.button(key="node_start").click().run()
    no_exception(at)
    assert any("Scrape running" in s.value for s in at.success)
    rerun_until(at, lambda a: any(f["data"] for f in figures(a)))
    rec = at.session_state["kvviz_node_run"]
    assert rec.startswith("node-") and rec.endswith(".db")
    at.button(key="node_stop").click().run()
    assert any("Scrape stopped" in w.value for w in at.warning)
    r = RunReader(node_runs / rec)
    assert r.status == "stopped" and (r.node_samples()["status"] == "ok").all()


def test_an_unreachable_node_is_an_error_and_nothing_starts(node_runs, closed_port_url):
    at = page(PAGE)
    at.text_input(key="node_url").input(closed_port_url)
    at.button(key="node_start").click().run()
    no_exception(at)
    assert "Cannot scrape" in errors(at) and "unreachable" in errors(at)
    assert "Nothing was started" in errors(at)
    assert not any("Scrape running" in s.value for s in at.success)
    assert directory.node_recordings(node_runs) == []


def test_a_second_scrape_shows_its_own_recording_not_the_first(node_runs, fake_node):
    write_node_run(node_runs / "node-old.db", ["unreachable", "unreachable"])
    at = page(PAGE)
    assert at.selectbox(key="node_pick").value == "node-old.db"
    assert "Last scrape: **unreachable**" in at.warning[0].value
    at.text_input(key="node_url").input(fake_node.url("/metrics"))
    at.number_input(key="node_every").set_value(0.5)
    at.button(key="node_start").click().run()
    no_exception(at)
    new = at.session_state["kvviz_node_run"]
    assert new != "node-old.db" and at.selectbox(key="node_pick").value == new
    rerun_until(at, lambda a: any("Last scrape: **ok**" in s.value for s in a.success))
    assert at.selectbox(key="node_pick").value == new
    assert not any("unreachable" in w.value for w in at.warning)
    at.button(key="node_stop").click().run()


def test_bad_url_is_an_error_not_a_scrape(node_runs):
    at = page(PAGE)
    at.text_input(key="node_url").input("file:///etc/passwd")
    at.button(key="node_start").click().run()
    no_exception(at)
    assert "only http" in errors(at)
    assert directory.node_recordings(node_runs) == []


def test_snapshot_summary_and_heatmap(node_runs, uploads):
    at = page(PAGE)
    uploads.put(SNAP, "snap.pickle", dumps(make_snapshot()))
    at.run()
    no_exception(at)
    values = tiles(at)
    assert values["Allocated"] == "10.0 MiB" and values["Inactive holes"] == "11.0 MiB"
    assert values["Largest hole"] == "4.0 MiB" and values["External fragmentation"] == "0.64"
    (hm,) = heatmaps(at)
    z = decode(hm["data"][0]["z"])
    assert z.dtype == "int8" and z.shape[0] == 2 and {0, 1, 3} <= set(z.ravel().tolist())
    table = at.dataframe[0].value
    assert list(table["largest free block MiB"]) == [4.0, pytest.approx((2 * 2**20 - 3072) /
                                                                        2**20)]


class Evil:
    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (os.mkdir, (self.path,))


@pytest.mark.parametrize("case", ["malicious", "truncated", "structure"])
def test_refused_snapshot_is_an_error_with_the_reason(node_runs, tmp_path, case, uploads):
    target = tmp_path / "pwned"
    data = {"malicious": pickle.dumps(Evil(str(target)), protocol=4),
            "truncated": dumps(make_snapshot())[:500],
            "structure": pickle.dumps({"segments": "nope"}, protocol=4)}[case]
    at = page(PAGE)
    uploads.put(SNAP, f"{case}.pickle", data)
    at.run()
    no_exception(at)
    expect = {"malicious": "refused to load global", "truncated": "truncated",
              "structure": "segments"}[case]
    assert "Refused" in errors(at) and expect in errors(at).lower() and not heatmaps(at)
    assert not target.exists()


def test_collector_snapshot_in_runs_is_offered(node_runs):
    (node_runs / "live-1-torchsnap-0.pickle").write_bytes(dumps(make_snapshot()))
    at = page(PAGE)
    at.selectbox(key="snap_pick").select("live-1-torchsnap-0.pickle").run()
    no_exception(at)
    assert heatmaps(at) and not at.error


class FakePrometheus(http.server.BaseHTTPRequestHandler):
    ANSWERS = {"up": [({"instance": "n1:8000", "job": "vllm"}, 1),
                      ({"instance": "n2:9400", "job": "kvviz"}, 1)],
               "vllm:kv_cache_usage_perc": [({"instance": "n1:8000", "job": "vllm"}, 0.5)],
               "kvviz_kv_used_tokens": [({"instance": "n2:9400", "job": "kvviz",
                                          "lane": "paged:16"}, 100)],
               "kvviz_kv_capacity_tokens": [({"instance": "n2:9400", "job": "kvviz",
                                              "lane": "paged:16"}, 400)],
               "kvviz_external_fragmentation": [({"instance": "n2:9400", "job": "kvviz",
                                                  "lane": "paged:16"}, 0.3)]}

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        q = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)["query"][0]
        result = [{"metric": m, "value": [0, str(v)]} for m, v in self.ANSWERS.get(q, [])]
        body = json.dumps({"status": "success",
                           "data": {"resultType": "vector", "result": result}}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def test_fleet_table_and_fleet_errors(node_runs):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FakePrometheus)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        at = page(PAGE)
        at.text_input(key="fleet_url").input(f"127.0.0.1:{server.server_address[1]}")
        at.button(key="fleet_go").click().run()
        no_exception(at)
        table = at.dataframe[0].value.set_index("instance")
        assert table.loc["n1:8000", "KV usage"] == "50.0%"
        assert table.loc["n2:9400", "KV usage"] == "25.0%"
        assert table.loc["n2:9400", "ext. fragmentation"] == "0.30"
        assert table.loc["n1:8000", "used / capacity (slots)"] == "n/a"
        notes = re.sub(r"\\(.)", r"\1", next(m.value for m in at.markdown
                                              if "**Notes**" in m.value))
        assert "- vllm n1:8000: usage: one pool; capacity in slots not exported" in notes
        assert "None" not in table.to_string()
        assert any("capacity" in c.value and "same definition" in c.value
                   for c in at.caption)
        at.text_input(key="fleet_url").input("ftp://nowhere")
        at.button(key="fleet_go").click().run()
        no_exception(at)
        assert "Cannot list nodes" in errors(at) and not at.dataframe
    finally:
        server.shutdown()
        server.server_close()


def test_a_growing_node_recording_is_drawn_from_its_latest_scrapes_only(node_runs):
    w = RunWriter(node_runs / "node-live.db", {"mode": "node", "url": "http://n:8000/metrics",
                                                "lanes": []})
    for i in range(1805):  # still "running": the panel redraws it every 2 s
        w.add_node_sample(float(i), {"time": 1e9 + i, "url": "http://n", "status": "ok",
                                     "engine": "vllm", "kv_usage": 0.5}, {})
    w.commit()
    at = page(PAGE)
    no_exception(at)
    assert any("the latest 1,800 scrapes" in c.value for c in at.caption)
    w.close()


def test_a_recording_without_a_request_log_names_the_doc_as_it_is_spelled(node_runs):
    write_node_run(node_runs / "node-a.db", ["ok", "ok"])
    at = page(PAGE)
    no_exception(at)
    said = [c.value for c in at.caption if c.value.startswith("What if?")]
    assert said and "docs/NODE.md" in said[0] and "kvviz attach --blocks" in said[0], said
