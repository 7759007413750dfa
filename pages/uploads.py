"""Upload limits. Not a page."""
from __future__ import annotations

# Largest upload, MiB (Streamlit's "MB"): the server refuses more (HTTP 413), so it must equal
# server.maxUploadSize in .streamlit/config.toml (tests/torchsnap/test_upload_limit.py checks).
UPLOAD_MAX_MB = 50
