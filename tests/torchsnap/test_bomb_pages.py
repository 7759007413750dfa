"""The Node page survives a pickle bomb: one st.error with the reason, no exception, and the
page still works for the next (good) snapshot. AppTest cannot upload: FakeUploads
(tests/pages/apptest_fixtures.py) stands in for the uploader."""
from __future__ import annotations

from pathlib import Path

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from kvviz.runs import process
from tests.pages.apptest_fixtures import FakeUploads, framed
from tests.torchsnap import bombs
from tests.torchsnap.snaps import dumps, make_snapshot

ROOT = Path(__file__).resolve().parents[2]
SNAP = "torch.cuda.memory._snapshot()"  # the snapshot uploader's label


@pytest.fixture
def node_page(tmp_path, monkeypatch):
    monkeypatch.setenv("KVVIZ_RUNS_DIR", str(tmp_path))
    st.cache_resource.clear()
    yield framed(AppTest.from_file(str(ROOT / "pages" / "node.py"), default_timeout=60))
    process.stop_all()
    st.cache_resource.clear()


@pytest.mark.parametrize("build", [bombs.deep_tuple_dict_key, bombs.deep_tuple_set_member])
def test_a_deep_tuple_upload_is_an_error_and_the_page_lives_on(node_page, monkeypatch, build):
    uploads = FakeUploads(monkeypatch)
    uploads.put(SNAP, "bomb.pickle", build())
    node_page.run()
    assert not node_page.exception
    assert "nests deeper than 200 levels" in " ".join(e.value for e in node_page.error)
    uploads.put(SNAP, "good.pickle", dumps(make_snapshot()))
    node_page.run()
    assert not node_page.exception and not node_page.error and node_page.get("plotly_chart")


def test_a_bomb_among_the_runs_snapshots_is_an_error(node_page, tmp_path):
    (tmp_path / "live-1-torchsnap-0.pickle").write_bytes(bombs.deep_tuple_dict_key())
    node_page.run()
    node_page.selectbox(key="snap_pick").select("live-1-torchsnap-0.pickle").run()
    assert not node_page.exception
    assert "nests deeper" in " ".join(e.value for e in node_page.error)
