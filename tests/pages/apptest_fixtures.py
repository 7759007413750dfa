"""What page tests put in place of a browser session, from outside the pages.

- `framed(at)`: a page script tested on its own runs as if app.py had framed the session
  (pages/frame.py), which app.py does for every browser session after its Host check.
- `FakeUploads`: AppTest cannot upload, so st.file_uploader is wrapped: the widget is still
  drawn, and the file put under its label comes back as if the user had uploaded it.
- `use_collector(monkeypatch, module)`: the demo collector runs `module` (tests use a fake).
"""
from __future__ import annotations

import io

import streamlit as st
from streamlit.testing.v1 import AppTest

from pages import democollector
from pages.frame import FRAMED_KEY


def framed(at: AppTest) -> AppTest:
    at.session_state[FRAMED_KEY] = True
    return at


class UploadedBytes(io.BytesIO):
    """Like Streamlit's UploadedFile: name, size, getvalue()."""

    def __init__(self, name: str, data: bytes) -> None:
        super().__init__(data)
        self.name, self.size = name, len(data)


class FakeUploads:
    def __init__(self, monkeypatch) -> None:
        self.files: dict[str, UploadedBytes | None] = {}
        real = st.file_uploader

        def file_uploader(label, *args, **kwargs):
            shown = real(label, *args, **kwargs)
            for prefix, f in self.files.items():
                if label.startswith(prefix):
                    return f
            return shown

        monkeypatch.setattr(st, "file_uploader", file_uploader)

    def put(self, label_prefix: str, name: str, data: bytes) -> None:
        self.files[label_prefix] = UploadedBytes(name, data)


def use_collector(monkeypatch, module: str) -> None:
    monkeypatch.setattr(democollector, "MODULE", module)
    st.cache_resource.clear()
