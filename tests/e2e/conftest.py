"""tests/e2e: the app in Debian's Chromium through Playwright (never `playwright install`)."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # appserver
sys.path.insert(0, str(Path(__file__).parents[1] / "pages"))  # recordings
