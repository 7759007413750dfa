"""tests/pages: the pages under streamlit.testing.v1.AppTest, on small real recordings."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import streamlit as st

from kvviz.runs import process
from tests.pages.apptest_fixtures import FakeUploads, use_collector
from tests.pages.recordings import write_recording


@pytest.fixture(scope="session")
def recording(tmp_path_factory) -> Path:
    """A finished recording (two lanes, failures, NVML unavailable), written once."""
    return write_recording(tmp_path_factory.mktemp("rec") / "rec.db", steps=600, every=20,
                           capacity=8192)


@pytest.fixture
def runs(tmp_path: Path, monkeypatch, recording: Path) -> Path:
    """A fresh runs directory holding rec.db; the demo collector is the fake one."""
    monkeypatch.setenv("KVVIZ_RUNS_DIR", str(tmp_path))
    shutil.copy(recording, tmp_path / "rec.db")
    use_collector(monkeypatch, "tests.pages.fake_collector")
    yield tmp_path
    process.stop_all()
    st.cache_resource.clear()


@pytest.fixture
def uploads(monkeypatch) -> FakeUploads:
    """Files a page's st.file_uploader returns, by label prefix (AppTest cannot upload)."""
    return FakeUploads(monkeypatch)
