"""The upload limit is one number: the server's, the widget's and the docs' agree."""
from __future__ import annotations

import re
from pathlib import Path

from pages import uploads

ROOT = Path(__file__).resolve().parents[2]


def test_server_limit_is_the_pages_constant():
    text = (ROOT / ".streamlit" / "config.toml").read_text()  # no tomllib before Python 3.11
    server = text.split("[server]", 1)[1].split("\n[", 1)[0]
    assert re.findall(r"^maxUploadSize\s*=\s*(\d+)\s*$", server, re.M) == [
        str(uploads.UPLOAD_MAX_MB)]


def test_node_docs_state_the_same_limit():
    text = (ROOT / "docs" / "NODE.md").read_text()
    stated = {int(m) for m in re.findall(r"pickle \((\d+) MB at\s+most", text)}
    assert stated == {uploads.UPLOAD_MAX_MB}


def test_the_snapshot_uploader_uses_the_constant():
    source = (ROOT / "pages" / "node_snapshot.py").read_text()
    assert "max_upload_size=uploads.UPLOAD_MAX_MB" in source
