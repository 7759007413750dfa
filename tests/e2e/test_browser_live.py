"""Live as a new user meets it, in Chromium, on a fresh server with the real demo collector:
nothing drawn before a real sample, a status box that counts, FRAGMENTATION (free >= need >
largest hole) within the demo's first minute, the glossary's words, a contiguous lane's
hover naming its slot and owner, a prefix lane started from the form with shared blocks and
hits, and a stopped collector's last write growing older. No request leaves 127.0.0.1.
Saves live.png and live-kvevents.png (into $KVVIZ_SCREENSHOTS when set: README's pictures)."""
from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest

from tests.e2e.appserver import CHROMIUM, ROOT, launch, serve, settle

pytestmark = [pytest.mark.browser,
              pytest.mark.xdist_group("live"),  # one worker each (-n 2 --dist loadgroup)
              pytest.mark.skipif(not Path(CHROMIUM).exists(),
                                 reason=f"{CHROMIUM} is missing (apt-get install chromium)")]
sync_api = pytest.importorskip("playwright.sync_api")

SHOTS = Path(os.environ.get("KVVIZ_SCREENSHOTS") or ROOT / ".pytest-screenshots")
HEAT = ".kvmap canvas[role=img]"
WAITING = "text=Waiting for the collector"
STATUS = '[data-testid="stAlertContentSuccess"], [data-testid="stAlertContentWarning"]'
ERRORS = '[data-testid="stException"], [data-testid="stAlertContentError"]'
FRAG = re.compile(r"FRAGMENTATION at t = ([\d.]+) s: seq \d+ needs ([\d,]+) slots; free "
                  r"([\d,]+), largest hole ([\d,]+)")
TOPS = "(cvs) => cvs.map(c => c.getBoundingClientRect().top)"  # each heatmap's top, px
LOCAL = ("http://127.0.0.1", "ws://127.0.0.1", "data:", "blob:", "about:")
RESTARTED = ("text=/prefix sharing 0.5, .*; lanes contiguous:first-fit:pow2, "
             "paged:16:prefix$/")
QUERIES = '[aria-label^="Prefix hit rate: "]'
HITS = '[aria-label^="Prefix hit rate: "]:not([aria-label="Prefix hit rate: 0%"])'


def _num(text: str) -> int:
    return int(text.replace(",", ""))


def _status(page) -> str:
    return page.locator(STATUS).first.inner_text()


def _up_s(page) -> int:
    m = re.search(r"up (?:(\d+) min )?(\d+) s", _status(page))
    assert m, _status(page)
    return int(m.group(1) or 0) * 60 + int(m.group(2))


def _no_error(page) -> None:
    boxes = page.locator(ERRORS)
    assert boxes.count() == 0, boxes.first.inner_text()


def _wait(page, selector: str, timeout_ms: int, what: str, runs: Path) -> None:
    """wait_for_selector; on a timeout, an AssertionError saying what the page and the
    recordings showed (which stage of a restart did not happen)."""
    try:
        page.wait_for_selector(selector, timeout=timeout_ms)
    except sync_api.TimeoutError:
        raise AssertionError(f"waited {timeout_ms / 1000:.0f} s for {what}; "
                             f"{_seen(page, runs)}") from None


def _seen(page, runs: Path) -> str:
    """The page's status and settings lines, its lanes, headline numbers and error boxes, and
    the newest recording's header and prefix counters."""
    labels = page.eval_on_selector_all('[aria-label^="Prefix hit rate"]',
                                       "els => els.map(e => e.getAttribute('aria-label'))")
    heads = page.eval_on_selector_all(  # a lane name: U+200B after colons, U+2060 after -
        "h4", "els => els.map(e => e.innerText.replace(/[\\u200b\\u2060]/g, ''))")
    boxes = page.locator(ERRORS).all_inner_texts()
    running = re.search(r"Started .*|Running: .*", page.inner_text("body"))
    shown = (f"page: {_status(page)!r}; {running and running.group(0)!r}; lanes {heads}; "
             f"{labels}; error boxes {boxes}")
    from kvviz.store.reader import RunReader
    live = sorted(runs.glob("live-*.db"))
    if not live:
        return shown + "; no live recording"
    r = RunReader(live[-1])
    try:
        last = r.samples(since_t=(r.last_t() or 0.0) - 1.0)
        rows = last.drop_duplicates("lane", keep="last")[
            ["lane", "t", "step", "prefix_query_tokens", "prefix_hit_tokens"]]
        log = live[-1].with_suffix(".log")
        return (f"{shown}; {live[-1].name}: {r.status} {r.status_message!r}, "
                f"{len(live)} live recordings, last samples {rows.to_dict('records')}, "
                f"log {log.read_text()[-500:] if log.exists() else ''!r}")
    finally:
        r.close()


def _pick_option(page, field, name: str, tries: int = 3) -> None:
    """Type `name` into a multiselect and click its option once the filtered list shows it.
    The typed text is sometimes gone before the list renders (about 1 run in 8 on this VM: a
    rerender of the form takes the input's text), so type it again, up to `tries` times."""
    for attempt in range(tries):
        field.click()
        field.fill(name)
        try:
            page.get_by_role("option", name=name, exact=True).click(timeout=5_000)
            return
        except sync_api.TimeoutError:
            if attempt == tries - 1:
                raise


def _open_settings(page, field, tries: int = 3) -> None:
    """Open the "Collector settings" expander until `field` inside it shows. Right after
    Resume the page's status box is redrawn, and under load (a CI run beside two
    benchmarks) the expander was once drawn closed again after the click, its lanes field
    hidden for 30 s; so open it again while the field stays hidden."""
    for attempt in range(tries):
        if not field.is_visible():
            page.get_by_text("Collector settings: workload, lanes").click()
        try:
            field.wait_for(state="visible", timeout=10_000)
            return
        except sync_api.TimeoutError:
            if attempt == tries - 1:
                raise


def _t(page) -> float:
    """The engine time the Live page shows ("t = 12.35 s")."""
    return float(re.search(r"t = ([\d.]+) s;", page.inner_text("body")).group(1))


def test_live_walk_as_a_new_user(tmp_path):
    outside: list[str] = []
    with serve(tmp_path, log=tmp_path / "server.log") as url, \
            sync_api.sync_playwright() as p:
        browser = launch(p)
        page = browser.new_page(viewport={"width": 1500, "height": 2000})
        page.on("request", lambda r: None if r.url.startswith(LOCAL) else outside.append(r.url))
        opened = time.monotonic()
        page.goto(url)
        page.wait_for_selector('[data-testid="stApp"]', timeout=30_000)
        # first paint: the waiting box until a real sample, never beside a map
        while page.locator(HEAT).count() == 0:
            assert time.monotonic() - opened < 90, "no heatmap within 90 s"
            page.wait_for_timeout(100)
        # Streamlit keeps an element of the previous run on screen (faded) until the run that
        # replaced it finishes: under load the box may outlive the first map by a moment
        deadline = time.monotonic() + 15
        while page.locator(WAITING).count():
            assert time.monotonic() < deadline, "the waiting box stays beside the map"
            page.wait_for_timeout(100)
        t_first = float(re.search(r"t = ([\d.]+) s", page.inner_text("body")).group(1))
        assert t_first > 0, "the map of the state before the engine's first step was drawn"
        deadline = time.monotonic() + 15  # each lane's canvas mounts on its own
        while (maps := page.locator(HEAT).count()) < 3 and time.monotonic() < deadline:
            page.wait_for_timeout(100)
        assert maps == 3, f"{maps} maps"  # the demo's three lanes side by side
        tops = page.locator(HEAT).evaluate_all(TOPS)
        assert len(set(tops)) == 1, f"the lanes' heatmaps do not line up: tops {tops}"
        # the status box counts (it was frozen at the page's first draw)
        up = _up_s(page)
        page.wait_for_timeout(3000)
        assert _up_s(page) >= up + 2, _status(page)
        # FRAGMENTATION within the demo's first minute, need against free and largest hole
        page.wait_for_selector("text=/FRAGMENTATION at t =/", timeout=75_000)
        m = FRAG.search(page.inner_text("body"))
        assert m, "a FRAGMENTATION line without its numbers"
        t, need, free, hole = float(m.group(1)), *(_num(g) for g in m.groups()[1:])
        assert t < 60 and free >= need > hole, m.group(0)
        page.wait_for_selector("text=/CAPACITY at t =/", timeout=30_000)
        # the numbers and refusals under the maps changed height since the first map (more
        # lines of refusals); the maps stayed put, so a hover box stays on its block
        for _ in range(3):
            assert page.locator(HEAT).evaluate_all(TOPS) == tops
            page.wait_for_timeout(1000)
        # one vocabulary: the glossary's words, not the old mixed ones
        body = page.inner_text("body")
        for word in ("Slack", "Tail waste", "External fragmentation index", "Largest hole",
                     "Glossary"):
            assert word in body, word
        for old in ("Reserved (slack)", "Ext. frag.", "Free (hole)"):
            assert old not in body, old
        # a contiguous lane: slots, and the hover names the owner sequence
        assert page.locator(".kvmap-sub").first.inner_text().startswith("slots 0-")
        box = page.locator(HEAT).first.bounding_box()
        page.mouse.move(box["x"] + 100, box["y"] + 12)
        tip = page.locator(".kvmap-tip").first
        tip.wait_for(state="visible", timeout=5_000)
        assert tip.inner_text().startswith("slot") and "owner seq" in tip.inner_text()
        page.mouse.move(0, 0)
        settle(page, "text=Admission failures", 30_000)
        _no_error(page)
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / "live.png"))
        # favicon and every asset from this server
        icons = page.eval_on_selector_all("link[rel~=icon]", "els => els.map(e => e.href)")
        assert icons and all(h.startswith(url) for h in icons), icons
        # Pause, then each Step press shows its engine step: t moves on by one step (0.05 s)
        page.get_by_role("button", name="Pause").click()
        page.wait_for_selector("text=/status: running \\(paused\\)/", timeout=20_000)
        page.wait_for_timeout(1500)  # the map of the moment it paused is drawn
        seen = [_t(page)]
        for _ in range(3):
            page.get_by_role("button", name="Step", exact=True).click()
            deadline = time.monotonic() + 15
            while _t(page) == seen[-1]:
                assert time.monotonic() < deadline, f"a Step press changed nothing: {seen}"
                page.wait_for_timeout(100)
            seen.append(_t(page))
        steps = [b - a for a, b in zip(seen, seen[1:])]
        assert all(0.04 <= d <= 0.06 for d in steps), seen  # one step of 0.05 s, shown to 0.01
        page.get_by_role("button", name="Resume").click()
        page.wait_for_selector("text=/status: running\\./", timeout=20_000)
        # a prefix lane from the form: shared blocks and hits within a minute
        lanes = page.get_by_test_id("stMain").get_by_test_id("stMultiSelect").first
        field = lanes.locator("input")
        _open_settings(page, field)
        field.click()
        for _ in range(2):  # drop paged:16 and first-fit:max, keep the pow2 lane
            field.press("Backspace")
        _pick_option(page, field, "paged:16:prefix")
        field.press("Escape")
        lanes.get_by_text("paged:16:prefix", exact=True).wait_for(timeout=15_000)  # the chip
        page.get_by_role("button", name="Start / restart with these settings").click()
        # three stages, each waited for on its own: the restart registers with these settings
        # (the old collector gets up to 10 s to stop), the new collector starts and its prefix
        # lane is drawn counting queries (a start under load: as the first map, 90 s), and its
        # first hit (engine time 3.7 s of this seeded stream) reaches the page
        _wait(page, RESTARTED, 30_000, "the restart to register", tmp_path)
        _wait(page, QUERIES, 90_000, "the prefix lane to be drawn", tmp_path)
        _wait(page, HITS, 60_000, "a prefix hit", tmp_path)
        page.wait_for_function("() => [...document.querySelectorAll('.kvmap canvas')].some("
                               "c => (c.getAttribute('aria-label') || '').includes("
                               "'Shared prefix'))", timeout=30_000)
        assert "Started" in page.inner_text("body") and "from this tab" in page.inner_text(
            "body")
        page.get_by_text("Collector settings: workload, lanes").click()  # fold the form
        # the lane's KV-event view fills: cached prompts counted
        settle(page, "text=/[1-9][0-9,]* prompts' first blocks cached/", 30_000)
        _no_error(page)
        page.screenshot(path=str(SHOTS / "live-kvevents.png"), full_page=True)
        # Stop: the last write grows older at each refresh (the page's button is named for
        # the collector; Streamlit's header shows a "Stop" of its own while a rerun runs long)
        page.get_by_role("button", name="Stop collector", exact=True).click()
        page.wait_for_selector("text=Collector stopped", timeout=20_000)
        deadline = time.monotonic() + 20
        while not ((age := re.search(r"last written (\d+) s ago", _status(page)))
                   and int(age.group(1)) >= 3):
            assert time.monotonic() < deadline, _status(page)
            page.wait_for_timeout(250)
        browser.close()
    assert outside == [], outside
