"""The dashboard's trust boundary through AppTest: the Host check in app.py (DNS rebinding),
KVVIZ_SCRAPE_ALLOW on the Node and Fleet tabs, and remote text shown as plain text."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from streamlit.runtime.context import ContextProxy

from kvviz.node.promtext import sample_from_text
from kvviz.runs import directory, process
from kvviz.store.writer import RunWriter
from tests.node.fakes import FIXTURES
from tests.pages.pagehelpers import no_exception, page, tiles

NODE = "pages/node.py"
PIXEL = "![p](http://attacker.example/pixel) [link](http://attacker.example/) <img src=x>"


@pytest.fixture
def node_runs(runs: Path):
    yield runs
    process.stop_all()


def forge_host(monkeypatch, host: str) -> None:
    """What a browser on http://<host>/ sends; AppTest itself sends no headers."""
    monkeypatch.setattr(ContextProxy, "headers", property(lambda self: {"host": host}))


def errors(at) -> str:
    return " ".join(e.value for e in at.error)


def test_foreign_host_is_refused_before_any_page_runs(runs, monkeypatch):
    forge_host(monkeypatch, "rebind.attacker.example:8501")
    at = page("app.py")
    no_exception(at)
    assert "Refused" in errors(at) and "server.allowedHosts" in errors(at)
    assert not at.title and not at.get("plotly_chart")


@pytest.mark.parametrize("host", ["localhost:8501", "127.0.0.1:8501", "[::1]:8501"])
def test_loopback_hosts_are_served(runs, monkeypatch, host):
    forge_host(monkeypatch, host)
    at = page("app.py")
    no_exception(at)
    assert "Refused" not in errors(at) and at.title


@pytest.fixture
def allowed_hosts():
    """Set server.allowedHosts (as `--server.allowedHosts` would) for one test."""
    from streamlit import config

    old = config.get_option("server.allowedHosts")
    yield lambda hosts: config.set_option("server.allowedHosts", hosts)
    config.set_option("server.allowedHosts", old)


def test_a_host_named_in_server_allowed_hosts_is_served(runs, monkeypatch, allowed_hosts):
    forge_host(monkeypatch, "dash.example:8501")
    allowed_hosts(["localhost", "dash.example"])
    at = page("app.py")
    assert "Refused" not in errors(at) and at.title


def test_the_app_refuses_even_when_streamlit_checks_nothing(runs, monkeypatch, allowed_hosts):
    forge_host(monkeypatch, "rebind.attacker.example:8501")
    allowed_hosts([])  # Streamlit's default: any Host
    at = page("app.py")
    assert "Refused" in errors(at) and not at.title


def write_node_run(path: Path, message: str, text: str | None = None) -> None:
    w = RunWriter(path, {"mode": "node", "url": "http://n:8000/metrics", "lanes": []})
    if text is not None:
        s = sample_from_text(text, url="http://n:8000/metrics", time=1e9).to_dict()
        raw = s.pop("raw")
        w.add_node_sample(0.0, s, raw)
    w.add_node_sample(1.0, {"time": 1e9 + 1, "url": "http://n:8000/metrics",
                            "status": "garbled", "message": message, "engine": "unknown"}, {})
    w.close()


def unescaped(md: str, token: str) -> bool:
    """Does `token` appear in Markdown source `md` without a backslash before each character?"""
    return re.search("".join(r"(?<!\\)" + re.escape(c) for c in token), md) is not None


def test_scraped_text_is_never_rendered_as_markdown(node_runs):
    write_node_run(node_runs / "node-a.db", f"not Prometheus text format; starts {PIXEL!r}")
    at = page(NODE)
    no_exception(at)
    shown = " ".join(w.value for w in at.warning)
    assert "attacker" in shown
    for token in ("![", "](", "<img"):
        assert not unescaped(shown, token)


def test_status_marks_in_the_figure_carry_escaped_html(node_runs):
    write_node_run(node_runs / "node-a.db", "<a href='http://attacker.example/'>x</a>")
    at = page(NODE)
    spec = at.get("plotly_chart")[0].proto.spec
    assert "attacker" in spec and "<a href" not in spec


def test_pools_and_prefix_caching_off_are_shown(node_runs):
    dp = (FIXTURES / "sglang_dp_attention_metrics.txt").read_text()
    write_node_run(node_runs / "node-dp.db", "", dp)
    at = page(NODE)
    no_exception(at)
    table = at.dataframe[0].value
    assert list(table["pool"]) == ["0", "1", "2", "3"]
    assert list(table["capacity_tokens"]) == [100_000, 100_000, 200_000, 100_000]


def test_vllm_v0_prefix_caching_off_shows_off(node_runs):
    write_node_run(node_runs / "node-v0.db", "", (FIXTURES / "vllm_v0_metrics.txt").read_text())
    at = page(NODE)
    values = tiles(at)
    assert values["Prefix hit rate"] == "off"


def test_scrape_outside_the_allow_list_is_refused_on_the_page(node_runs, monkeypatch):
    monkeypatch.setenv("KVVIZ_SCRAPE_ALLOW", "10.0.0.0/8")
    at = page(NODE)
    at.text_input(key="node_url").input("127.0.0.1:9").run()
    at.button(key="node_start").click().run()
    no_exception(at)
    assert "KVVIZ\\_SCRAPE\\_ALLOW" in errors(at)
    assert directory.node_recordings(node_runs) == []


def test_fleet_outside_the_allow_list_is_refused(node_runs, monkeypatch):
    monkeypatch.setenv("KVVIZ_SCRAPE_ALLOW", "prometheus.internal")
    at = page(NODE)
    at.text_input(key="fleet_url").input("http://127.0.0.1:9").run()
    at.button(key="fleet_go").click().run()
    no_exception(at)
    assert "Cannot list nodes" in errors(at) and "KVVIZ\\_SCRAPE\\_ALLOW" in errors(at)
