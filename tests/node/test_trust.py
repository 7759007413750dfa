"""KVVIZ_SCRAPE_ALLOW, the dashboard's Host check and plain-text Markdown."""
from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from kvviz.node.fleet import FleetError, list_nodes
from kvviz.node.promtext import NodeStatus
from kvviz.node.scrape import Scraper, scrape_once
from kvviz.node.trust import (
    ScrapeAllow,
    ScrapeNotAllowedError,
    dashboard_host_ok,
    plain_markdown,
)


def test_unset_empty_or_star_allows_anything():
    for text in (None, "", " , ", "gpu1,*"):
        assert ScrapeAllow.parse(text).anything


def test_entries_are_names_and_networks():
    a = ScrapeAllow.parse(" GPU7.example. , 10.0.0.0/8, ::1, 192.168.1.5 ")
    assert a.names == {"gpu7.example"} and len(a.nets) == 3 and not a.anything


@pytest.mark.parametrize("bad", ["gpu 7", "http://gpu7", "10.0.0.0/99", "a/b"])
def test_a_malformed_entry_is_named_in_the_error(bad):
    with pytest.raises(ScrapeNotAllowedError, match="KVVIZ_SCRAPE_ALLOW"):
        ScrapeAllow.parse(f"gpu1,{bad}")


@pytest.mark.parametrize("host, ok", [
    ("gpu7.example", True), ("GPU7.example", True), ("10.1.2.3", True), ("11.0.0.1", False),
    ("gpu8.example", True),  # not listed by name: decided by its address after connect
])
def test_check_host_before_connecting(host, ok):
    a = ScrapeAllow.parse("gpu7.example,10.0.0.0/8")
    if ok:
        a.check_host(host)
    else:
        with pytest.raises(ScrapeNotAllowedError):
            a.check_host(host)


def test_a_name_is_refused_before_connecting_when_only_names_are_listed():
    with pytest.raises(ScrapeNotAllowedError, match="gpu8"):
        ScrapeAllow.parse("gpu7").check_host("gpu8")


def test_check_peer_uses_the_address_connected_to():
    a = ScrapeAllow.parse("10.0.0.0/8")
    a.check_peer("gpu8", "10.9.9.9")
    with pytest.raises(ScrapeNotAllowedError, match="127.0.0.1"):
        a.check_peer("rebound.example", "127.0.0.1")


def test_scrape_outside_the_list_raises_before_contacting(fake_node, monkeypatch):
    monkeypatch.setenv("KVVIZ_SCRAPE_ALLOW", "10.0.0.0/8")
    with pytest.raises(ScrapeNotAllowedError):
        scrape_once(fake_node.url("/metrics"))
    with pytest.raises(ScrapeNotAllowedError):
        Scraper(fake_node.url("/metrics"), lambda s: None)
    assert fake_node.hits == {}


def test_scrape_inside_the_list_works(fake_node, monkeypatch):
    monkeypatch.setenv("KVVIZ_SCRAPE_ALLOW", "127.0.0.0/8")
    assert scrape_once(fake_node.url("/metrics")).ok


def test_a_name_resolving_outside_the_networks_is_refused_after_connect(fake_node,
                                                                         monkeypatch):
    monkeypatch.setenv("KVVIZ_SCRAPE_ALLOW", "10.0.0.0/8")
    s = scrape_once(fake_node.url("/metrics").replace("127.0.0.1", "localhost"))
    assert s.status == NodeStatus.UNREACHABLE and "KVVIZ_SCRAPE_ALLOW" in s.message
    assert fake_node.hits == {}  # refused on connect, before any request was sent


def test_a_redirect_outside_the_list_is_refused(fake_node, monkeypatch):
    monkeypatch.setenv("KVVIZ_SCRAPE_ALLOW", "localhost")
    s = scrape_once(fake_node.url("/moved-to-ip").replace("127.0.0.1", "localhost"))
    assert s.status == NodeStatus.UNREACHABLE and "127.0.0.1" in s.message
    assert "/metrics" not in fake_node.hits


def test_fleet_outside_the_list_is_refused(closed_port_url, monkeypatch):
    monkeypatch.setenv("KVVIZ_SCRAPE_ALLOW", "prometheus.internal")
    with pytest.raises(FleetError, match="KVVIZ_SCRAPE_ALLOW"):
        list_nodes(closed_port_url.removesuffix("/metrics"))


@pytest.mark.parametrize("host, bind, extra, ok", [
    ("localhost:8501", "127.0.0.1", (), True),
    ("127.0.0.1:8501", "127.0.0.1", (), True),
    ("127.5.5.5", "127.0.0.1", (), True),
    ("[::1]:8501", "127.0.0.1", (), True),
    ("app.localhost:8501", "127.0.0.1", (), True),
    ("rebind.attacker.example:8501", "127.0.0.1", (), False),
    ("localhost.attacker.example", "127.0.0.1", (), False),
    ("192.168.1.5:8501", "127.0.0.1", (), False),
    ("192.168.1.5:8501", "192.168.1.5", (), True),
    ("192.168.1.5:8501", "0.0.0.0", (), True),  # IP literal: no rebinding possible
    ("gpu7:8501", "0.0.0.0", (), False),
    ("gpu7:8501", "0.0.0.0", ("GPU7",), True),
    ("anything.example", "127.0.0.1", ("*",), True),
    ("a.dash.example", "127.0.0.1", ("*.dash.example",), True),
    ("dash.example.attacker.example", "127.0.0.1", ("*.dash.example",), False),
    (None, "127.0.0.1", (), True),  # no header: not a browser request
])
def test_dashboard_host_check(host, bind, extra, ok):
    assert dashboard_host_ok(host, server_address=bind, extra=extra) is ok


_ACTIVE = set("\\`*_{}[]()<>#+-.!|~:$=^&\"'")


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=200))
def test_plain_markdown_escapes_every_active_character(text):
    out = plain_markdown(text)
    i = 0
    shown = []
    while i < len(out):
        if out[i] == "\\":
            assert out[i + 1] in _ACTIVE
            shown.append(out[i + 1])
            i += 2
            continue
        assert out[i] not in _ACTIVE and (out[i].isprintable() or out[i] == WJ)
        shown.append(out[i])
        i += 1
    # what is shown is the text, with the word joiners that keep bare URLs from linking
    assert "".join(shown).replace(WJ, "") == "".join(
        c if c.isprintable() else " " for c in text).replace(WJ, "")


WJ = "\u2060"  # U+2060 WORD JOINER


def test_plain_markdown_of_an_image_link():
    # the word joiner (U+2060) inside "http" keeps GFM from linking the bare URL
    assert plain_markdown("![p](http://x/pixel)") == "\\!\\[p\\]\\(h\u2060ttp\\://x/pixel\\)"


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=80), st.text(max_size=60))
@example("http://[", "")
@example("gpu7:99999", "")
@example("gpu7:x", "gpu7")
@example("a b:80", "")
def test_any_typed_url_and_allow_list_give_a_url_or_one_clear_error(url, allow):
    from kvviz.core.errors import KvvizError
    from kvviz.node.scrape import normalize_url
    from kvviz.node.trust import check_scrape_url

    try:
        check_scrape_url(normalize_url(url), env={"KVVIZ_SCRAPE_ALLOW": allow})
    except KvvizError as exc:
        assert str(exc)


@pytest.mark.parametrize("url", ["http://[", "prom:99999", "prom:x", "ftp://prom",
                                 "http://a b:9090", "http://"])
def test_a_malformed_fleet_url_is_one_clear_error_before_contacting(url):
    with pytest.raises(FleetError, match="URL"):
        list_nodes(url, timeout_s=0.5)


@settings(max_examples=60, deadline=None)
@given(st.one_of(st.none(), st.text(max_size=60)), st.text(max_size=20),
       st.lists(st.text(max_size=12), max_size=3))
def test_any_host_header_gives_a_yes_or_no(host, bind, extra):
    assert dashboard_host_ok(host, server_address=bind, extra=extra) in (True, False)
