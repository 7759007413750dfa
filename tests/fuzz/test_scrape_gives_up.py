"""#41.7: `kvviz scrape URL` without --count or --duration says how to stop and gives up on a
dead node after a stated number of failed scrapes in a row (before: 121 tries in 10 min)."""
from __future__ import annotations

import contextlib
import io

import pytest

import kvviz.node.scrape as scrape_mod
from kvviz.node.promtext import NodeSample, NodeStatus
from tests.fuzz.hostile import check_property, fake_scrape_once, run_cli


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def tries(monkeypatch):
    made: list[str] = []

    def dead(url: str, **_kw) -> NodeSample:
        made.append(url)
        return NodeSample(time=0.0, url=url, status=NodeStatus.UNREACHABLE, message="refused")

    monkeypatch.setattr(scrape_mod, "scrape_once", dead)
    return made


def test_a_dead_node_is_given_up_after_the_stated_tries(tries):
    argv = ["scrape", "127.0.0.1:9", "--interval", "0.01", "--give-up", "4", "--quiet"]
    res = run_cli(argv)
    check_property("scrape", argv, res, allow_one=True)
    assert res.code == 1 and len(tries) == 4
    assert "gave up after 4 failed scrapes in a row" in res.err


def test_the_default_is_stated_in_help_and_bounded(tries):
    from kvviz.commands.scrape import GIVE_UP

    res = run_cli(["scrape", "--help"])
    assert f"default {GIVE_UP}" in res.out.replace("\n", " ").replace("  ", " ")
    res = run_cli(["scrape", "127.0.0.1:9", "--interval", "0.001", "--quiet"])
    assert res.code == 1 and len(tries) == GIVE_UP


def test_count_or_duration_keep_their_own_bound(tries):
    res = run_cli(["scrape", "127.0.0.1:9", "--interval", "0.001", "--count", "20", "--quiet"])
    assert res.code == 1 and len(tries) == 20


def test_a_terminal_is_told_how_to_stop(monkeypatch, tries):
    from kvviz.commands.cli import main

    err = Tty()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        main(["scrape", "127.0.0.1:9", "--interval", "0.001", "--give-up", "2"])
    assert "until Ctrl-C" in err.getvalue() and "gives up after 2 failed" in err.getvalue()


def test_a_node_that_answered_then_died_ends_with_a_warning(monkeypatch):
    calls = []

    def flaky(url: str, **kw) -> NodeSample:
        calls.append(url)
        if len(calls) <= 2:
            return fake_scrape_once(url)
        return NodeSample(time=0.0, url=url, status=NodeStatus.TIMEOUT, message="slow")

    monkeypatch.setattr(scrape_mod, "scrape_once", flaky)
    argv = ["scrape", "127.0.0.1:9", "--interval", "0.001", "--give-up", "3", "--quiet"]
    res = run_cli(argv)
    check_property("scrape", argv, res)
    assert res.code == 0 and len(calls) == 5 and "warning: the node stopped answering" in res.err
