"""A direct link to a page on a fresh server (Streamlit would run pages/compare.py alone, its
first-generation multipage mode) still goes through app.py: the page shows inside the app's
navigation, which lists the registered pages and no helper module, with app.py's sidebar:
app.py ran, Host check first (a foreign Host is refused there: tests/pages/test_trust_pages.py,
and by Streamlit before it: tests/pages/test_trust_server.py)."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.appserver import CHROMIUM, launch, serve

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(not Path(CHROMIUM).exists(),
                                 reason=f"{CHROMIUM} is missing (apt-get install chromium)")]
sync_api = pytest.importorskip("playwright.sync_api")

PAGES = ["Live", "Compare", "Learn", "Replay", "GPU", "Node"]  # app.py's st.navigation


def test_a_direct_link_on_a_fresh_server_shows_the_page_inside_the_app(tmp_path):
    with serve(tmp_path, log=tmp_path / "server.log") as url, \
            sync_api.sync_playwright() as p:
        browser = launch(p)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(f"{url}/compare")  # the first page this server ever serves
            page.wait_for_selector("h1:has-text('Compare allocators')", timeout=60_000)
            nav = page.get_by_test_id("stSidebarNav")
            nav.wait_for(timeout=30_000)
            links = [t.split()[-1] for t in nav.locator("a").all_inner_texts()]  # no icon
            assert links == PAGES, links  # app.py's pages only, none of pages/ helper modules
            assert page.get_by_text("Glossary: the words every page uses").count() == 1
            assert page.url.rstrip("/").endswith("/compare")
        finally:
            browser.close()

