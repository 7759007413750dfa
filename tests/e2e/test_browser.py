"""Every page in a real browser: no error box; the Live heatmap renders and changes;
Learn's Next advances the story. Takes a screenshot of each page but Live (whose pictures
test_browser_live.py takes): into $KVVIZ_SCREENSHOTS when set
(`KVVIZ_SCREENSHOTS=docs/screenshots` refreshes the README's pictures), else into
.pytest-screenshots. The Node page's picture is of a `kvviz attach` recording: a real vLLM's when
$KVVIZ_NODE_RECORDING names one (docs/NODE.md section 7's commands), else a small synthetic one."""
from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.appserver import CHROMIUM, ROOT, launch, serve, settle

pytestmark = [pytest.mark.browser,
              pytest.mark.xdist_group("app"),  # one worker each (-n 2 --dist loadgroup)
              pytest.mark.skipif(not Path(CHROMIUM).exists(),
                                 reason=f"{CHROMIUM} is missing (apt-get install chromium)")]
sync_api = pytest.importorskip("playwright.sync_api")

SHOTS = Path(os.environ.get("KVVIZ_SCREENSHOTS") or ROOT / ".pytest-screenshots")
HEAT = ".kvmap canvas[role=img]"  # the Live page's canvas heatmaps (kvviz.viz.blockcanvas)
PLOTLY_HEAT = ".heatmaplayer image"  # Replay's plotly heatmap
# distinct colours painted on a canvas (sampled on a grid): a blank canvas has one
COLOURS = """(cv) => {
  const d = cv.getContext('2d').getImageData(0, 0, cv.width, cv.height).data;
  const seen = new Set();
  for (let i = 0; i < d.length; i += 4 * 97) seen.add(d[i] << 16 | d[i + 1] << 8 | d[i + 2]);
  return seen.size;
}"""
DIGESTS = "() => [...document.querySelectorAll('.kvmap')].map(e => e.dataset.digest).join()"
ERRORS = '[data-testid="stException"], [data-testid="stAlertContentError"]'
PAGED = 2  # the default demo's lanes: contiguous pow2, contiguous max, paged:16
PAGES = {"live": "", "compare": "compare", "learn": "learn", "replay": "replay", "gpu": "gpu",
         "node": "node"}


@pytest.fixture(scope="module")
def app(tmp_path_factory) -> Iterator[str]:
    from tests.pages.recordings import write_recording

    runs = tmp_path_factory.mktemp("runs")
    write_recording(runs / "demo-recording.db", steps=900, every=15, capacity=8192)
    real = os.environ.get("KVVIZ_NODE_RECORDING")
    if real:
        shutil.copy(real, runs / "node-vllm.db")
    else:
        from tests.kvevents.conftest import free_base_port
        from tests.kvevents.recordings import write_attach_recording
        write_attach_recording(runs / "node-attach.db", free_base_port(2))
    with serve(runs, log=runs / "server.log") as url:
        yield url


@pytest.fixture(scope="module")
def browser(app) -> Iterator:
    with sync_api.sync_playwright() as p:
        b = launch(p)
        yield b
        b.close()


def open_page(browser, url: str, height: int = 1800):
    page = browser.new_page(viewport={"width": 1500, "height": height})
    page.goto(url)
    page.wait_for_selector('[data-testid="stApp"]', timeout=30_000)
    return page


def assert_no_error(page) -> None:
    boxes = page.locator(ERRORS)
    assert boxes.count() == 0, boxes.first.inner_text()


def block_named(tip) -> str:
    """The block a hover box names ("block 36"), without its state."""
    return tip.inner_text().split(":")[0]


def repainted(page) -> None:
    """Wait for the next repaint of the paged lane's heatmap (one a second; a loaded machine
    with a browser test on each core has taken over 5 s)."""
    draws = int(page.locator(".kvmap").nth(PAGED).get_attribute("data-draws"))
    page.wait_for_function(f"() => +document.querySelectorAll('.kvmap')[{PAGED}].dataset.draws"
                           f" > {draws}", timeout=15_000)


def test_live_heatmap_renders_and_changes(browser, app):
    page = open_page(browser, app)
    settle(page, HEAT, timeout_ms=90_000)
    assert_no_error(page)
    assert page.locator(HEAT).count() == 3  # the demo's three lanes, side by side
    for i in range(3):
        assert page.locator(HEAT).nth(i).evaluate(COLOURS) >= 3  # states painted, not blank
    before = page.evaluate(DIGESTS)  # hashes of the state grids the canvases painted
    # the demo repaints once a second; a machine loaded to 9 (a CI run beside two
    # benchmarks) has taken over 5 s, so wait up to 30
    changed, end = False, time.monotonic() + 30
    while not changed and time.monotonic() < end:
        page.wait_for_timeout(200)
        changed = page.evaluate(DIGESTS) != before
    assert changed, "the Live heatmap did not change within 30 s"
    # hover: the box names the block under the mouse, and stays on it through the next
    # repaints (the heatmap stays where it is while the numbers above it change)
    box = page.locator(HEAT).nth(PAGED).bounding_box()
    page.mouse.move(box["x"] + 120, box["y"] + 20)
    tip = page.locator(".kvmap-tip").nth(PAGED)
    tip.wait_for(state="visible", timeout=5_000)
    named = block_named(tip)
    assert named.startswith("block ")
    assert "owner seq" in tip.inner_text() or "mostly" in tip.inner_text()
    for _ in range(3):
        repainted(page)
        assert tip.is_visible() and block_named(tip) == named
    assert page.locator(HEAT).nth(PAGED).bounding_box() == box
    # the heatmap moved under a still mouse (as by a box appearing above it): after the next
    # repaint the box names the block now under the mouse, the one a fresh hover names
    page.mouse.move(box["x"] + 120, box["y"] + 80)
    tip.wait_for(state="visible", timeout=5_000)
    page.locator(".kvmap").nth(PAGED).evaluate("(e) => { e.style.paddingTop = '30px'; }")
    repainted(page)
    moved = block_named(tip) if tip.is_visible() else "no box"
    page.mouse.move(box["x"] + 121, box["y"] + 80)
    page.mouse.move(box["x"] + 120, box["y"] + 80)
    assert moved == block_named(tip) != named
    page.locator(".kvmap").nth(PAGED).evaluate("(e) => { e.style.paddingTop = ''; }")
    # drag across cells: the page zooms to that address range; a double click undoes it
    sub = page.locator(".kvmap-sub").nth(PAGED)
    assert sub.inner_text().startswith("blocks 0-")
    page.mouse.move(box["x"] + 150, box["y"] + 40)
    page.mouse.down()
    page.mouse.move(box["x"] + 300, box["y"] + 60, steps=5)
    page.mouse.up()
    # zoomed: the subtitle names a range that starts past block 0 (a subtitle being redrawn,
    # or a heatmap mounted again and not yet drawn, is not the zoom), and keeps it through
    # the next repaints (a tick requested before the zoom once undid it for a tick)
    page.wait_for_function(f"() => /^blocks [1-9]/.test(document.querySelectorAll("
                           f"'.kvmap-sub')[{PAGED}]?.textContent)", timeout=10_000)
    zoomed = sub.inner_text().split(";")[0]
    assert int(zoomed.split()[1].split("-")[0].replace(",", "")) > 0, zoomed
    for _ in range(2):
        repainted(page)
        assert sub.inner_text().split(";")[0] == zoomed
    assert page.get_by_text("Zoom: address range shown").count() == 1
    box = page.locator(HEAT).nth(PAGED).bounding_box()  # the zoom caption may move it
    page.mouse.dblclick(box["x"] + 150, box["y"] + 40)
    page.wait_for_function(f"() => document.querySelectorAll('.kvmap-sub')[{PAGED}]"
                           "?.textContent.startsWith('blocks 0-')", timeout=10_000)
    page.mouse.move(0, 0)
    settle(page, "text=Admission failures", 30_000)  # the history follows
    assert_no_error(page)  # live.png comes from test_browser_live.py's walk
    page.close()


@pytest.mark.parametrize("name", ["compare", "learn", "replay", "gpu", "node"])
def test_page_loads_without_error(browser, app, name: str):
    if not (ROOT / "pages" / f"{name}.py").exists():
        pytest.skip(f"pages/{name}.py is not there yet")
    page = open_page(browser, f"{app}/{PAGES[name]}")
    if name == "replay":  # show the finished demo recording rather than the live one
        page.get_by_test_id("stSidebar").get_by_test_id("stSelectbox").first.click()
        page.get_by_role("option", name="demo-recording.db").click()
    settle(page, {"replay": PLOTLY_HEAT, "node": "text=Last scrape"}.get(name, "h1"))
    assert_no_error(page)
    if name == "compare":  # a screenshot worth looking at: run the default comparison
        page.get_by_role("button", name="Run comparison").click()
        settle(page, ".main-svg", 120_000)
        assert_no_error(page)
    if name == "learn":  # the step where D is refused (shown as a red box on purpose)
        for k in range(2, 5):
            page.get_by_role("button", name="Next").click()
            page.wait_for_selector(f"text=Step {k} of", timeout=15_000)
        settle(page)
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"))
    page.close()


def test_learn_next_advances_the_story(browser, app):
    if not (ROOT / "pages" / "learn.py").exists():
        pytest.skip("pages/learn.py is not there yet")
    page = open_page(browser, f"{app}/learn")
    page.wait_for_selector("text=Step 1 of", timeout=30_000)
    page.get_by_role("button", name="Next").click()
    page.wait_for_selector("text=Step 2 of", timeout=15_000)
    assert_no_error(page)
    page.close()
