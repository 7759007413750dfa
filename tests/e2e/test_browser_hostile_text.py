"""Names from a recording in a real browser (issue 26 item 7): a lane name carrying Markdown
(an image, a link) and HTML on Replay, endpoint names carrying HTML in the KV events figures.
The browser must fetch nothing from the address they name and show no link to it."""
from __future__ import annotations

import http.server
import shutil
import threading
from pathlib import Path

import pytest

from tests.e2e.appserver import CHROMIUM, free_port, launch, serve, settle

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(not Path(CHROMIUM).exists(),
                                 reason=f"{CHROMIUM} is missing (apt-get install chromium)")]
sync_api = pytest.importorskip("playwright.sync_api")
ERRORS = '[data-testid="stException"]'


class Trap(http.server.BaseHTTPRequestHandler):
    hits: list[str] = []

    def do_GET(self):  # noqa: N802 - the http.server name
        Trap.hits.append(self.path)
        self.send_response(204)
        self.end_headers()

    def log_message(self, *_):
        pass


def test_names_from_recordings_are_text_in_the_browser(tmp_path):
    from tests.kvevents.conftest import free_base_port
    from tests.kvevents.recordings import write_kv_recording
    from tests.pages.hostile_text import lane_name, rename_endpoints, rename_lane
    from tests.pages.recordings import write_recording

    port = free_port()
    trap = http.server.HTTPServer(("127.0.0.1", port), Trap)
    threading.Thread(target=trap.serve_forever, daemon=True).start()
    runs = tmp_path / "runs"
    runs.mkdir()
    write_recording(tmp_path / "rec.db", steps=200, every=20, capacity=8192)
    shutil.copy(tmp_path / "rec.db", runs / "evil.db")
    rename_lane(runs / "evil.db", "paged:16", lane_name(port))
    write_kv_recording(runs / "kv-events.db", free_base_port(2))
    rename_endpoints(runs / "kv-events.db", port)
    links = f'a[href*="127.0.0.1:{port}"], img[src*="127.0.0.1:{port}"]'
    try:
        with serve(runs, log=tmp_path / "server.log") as url, \
                sync_api.sync_playwright() as p:
            b = launch(p)
            page = b.new_page(viewport={"width": 1500, "height": 1800})
            page.goto(f"{url}/replay")
            page.get_by_test_id("stSidebar").get_by_test_id("stSelectbox").first.click(
                timeout=60_000)
            page.get_by_role("option", name="evil.db").click()
            page.get_by_text("[Click to log in]", exact=False).first.wait_for(timeout=60_000)
            settle(page, ".main-svg")
            found = page.locator(links)
            assert found.count() == 0, [found.nth(i).evaluate(
                "e => e.outerHTML + ' IN ' + e.parentElement.parentElement.outerHTML.slice(0, 300)")
                for i in range(found.count())]
            assert page.locator("svg text", has_text="<a href=").count() > 0  # as text
            page.goto(f"{url}/node")
            page.get_by_role("tab", name="KV events").click(timeout=60_000)
            page.wait_for_selector("g.iciclelayer", timeout=60_000)
            page.get_by_role("tab", name="Streams side by side").click()
            settle(page)
            assert page.locator(links).count() == 0
            assert page.locator("svg text", has_text="pod 1</a>").count() > 0
            assert page.locator(ERRORS).count() == 0
            b.close()
    finally:
        trap.shutdown()
        trap.server_close()
    assert Trap.hits == [], Trap.hits
