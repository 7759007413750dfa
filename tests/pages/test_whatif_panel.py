"""The "What if?" panel on the Compare page (AppTest): alternatives run, bad lists show st.error,
an alternative opens in Replay as a recording of its run."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from kvviz.store.reader import RunReader
from tests.pages.apptest_fixtures import framed

PAGE = str(Path(__file__).resolve().parents[2] / "pages" / "compare.py")


@pytest.fixture
def at(tmp_path, monkeypatch) -> AppTest:
    monkeypatch.setenv("KVVIZ_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("KVVIZ_RUNS_DIR", str(tmp_path / "runs"))
    app = framed(AppTest.from_file(PAGE, default_timeout=180))
    app.run()
    assert not app.exception
    next(n for n in app.number_input if n.label == "Requests").set_value(120)
    app.run()
    return app


def _field(app: AppTest, label: str):
    return next(t for t in app.text_input if t.label == label)


def _submit(app: AppTest) -> None:
    next(b for b in app.button if b.label == "Run the alternatives").click()
    app.run()


def test_alternatives_give_a_table_and_curves_against_the_node(at):
    _field(at, "Block sizes").set_value("16,32")
    _submit(at)
    assert not at.exception and not at.error
    (table,) = [d for d in at.dataframe if "configuration" in d.value.columns]
    assert list(table.value["configuration"])[0] == "node's own"
    assert len(table.value) == 3
    assert any("no node run to compare" in i.value for i in at.info)


def test_a_bad_list_is_one_error(at):
    _field(at, "KV memory").set_value("1.2y")
    _submit(at)
    assert not at.exception
    shown = [re.sub(r"\\(.)", r"\1", e.value) for e in at.error]  # plain text, escaped
    assert any("--kv-memory: '1.2y': neither a multiple" in e for e in shown), shown


def test_an_alternative_is_recorded_for_replay(at, tmp_path):
    _field(at, "max_num_seqs").set_value("8")
    _submit(at)
    pick = next(s for s in at.selectbox if s.label.startswith("Open a configuration"))
    pick.set_value(1)
    next(b for b in at.button if b.label == "Record it and open Replay").click()
    at.run()
    runs = list((tmp_path / "runs").glob("whatif-*.db"))
    assert len(runs) == 1
    r = RunReader(runs[0])
    try:
        assert r.meta["whatif"]["settings"]["max_num_seqs"] == 8
        assert r.samples()["step"].max() > 0
    finally:
        r.close()
    assert at.session_state["kvviz_run"] == runs[0].name


NODE_PAGE = "pages/node.py"


def test_the_node_pages_panel_replays_an_attach_recording_and_its_alternatives(runs):
    from tests.pages.pagehelpers import no_exception, page
    from tests.twin import noderun

    noderun.write(runs / "node-blocks.db", noderun.workload(16, spread=20))
    at = page(NODE_PAGE)
    no_exception(at)
    _field(at, "Block sizes").set_value("32")
    _submit(at)
    no_exception(at)
    assert not at.error
    shown = [re.sub(r"\\(.)", r"\1", s.value) for s in at.success]  # plain text, escaped
    assert any(s.startswith("Self-check: replay equals the node") for s in shown), shown
    (table,) = [d for d in at.dataframe if "configuration" in d.value.columns]
    assert list(table.value["configuration"]) == ["node's own", "block 32, blocks 48"]


def test_a_request_log_it_cannot_replay_is_one_error_on_the_node_page(runs):
    import sqlite3

    from tests.pages.pagehelpers import no_exception, page
    from tests.twin import noderun

    path = noderun.write(runs / "node-blocks.db", noderun.workload(8, spread=10))
    db = sqlite3.connect(path)
    db.execute("UPDATE request_log SET prompt_hashes = substr(prompt_hashes, 1, 3)")
    db.commit()
    db.close()
    at = page(NODE_PAGE)
    no_exception(at)
    shown = [re.sub(r"\\(.)", r"\1", e.value) for e in at.error]
    assert any("not whole hashes" in e for e in shown), shown
