"""tests/e2e: the app in Debian's Chromium through Playwright (never `playwright install`)."""
from __future__ import annotations


