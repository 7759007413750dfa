"""The Node page's KV events tab in a real browser: the prefix forest (icicle) draws, no error
box."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.e2e.appserver import CHROMIUM, ROOT, launch, serve, settle

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(not Path(CHROMIUM).exists(),
                                 reason=f"{CHROMIUM} is missing (apt-get install chromium)")]
sync_api = pytest.importorskip("playwright.sync_api")
pytest.importorskip("zmq")
SHOTS = Path(os.environ.get("KVVIZ_SCREENSHOTS") or ROOT / ".pytest-screenshots")
ERRORS = '[data-testid="stException"], [data-testid="stAlertContentError"]'


def test_kv_events_tab_draws_the_forest(tmp_path):
    from tests.kvevents.conftest import free_base_port
    from tests.kvevents.recordings import write_kv_recording

    write_kv_recording(tmp_path / "kv-events.db", free_base_port(2))
    with serve(tmp_path, log=tmp_path / "server.log") as url, \
            sync_api.sync_playwright() as p:
        b = launch(p)
        page = b.new_page(viewport={"width": 1500, "height": 2200})
        page.goto(f"{url}/node")
        page.get_by_role("tab", name="KV events").click(timeout=60_000)
        page.wait_for_selector("g.iciclelayer", timeout=60_000)
        settle(page, "text=different seeds", 30_000)
        boxes = page.locator(ERRORS)
        assert boxes.count() == 0, boxes.first.inner_text()
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / "node-kvevents.png"), full_page=True)  # README
        b.close()
