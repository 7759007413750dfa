"""Where the CPU goes while Chromium tabs watch the Live page: a profiling aid for
bench_browser.py's targets, not a benchmark of its own.

Starts the app as the README says (temporary runs dir), opens the Live page `--tabs` times
(one browser context each, as bench_browser.py), and over `--seconds` prints:
  - heatmap redraws per second per tab,
  - CPU seconds per second by process group (Streamlit server, demo collector, its store
    writer, Chromium by process type: renderer, gpu-process, browser, ...),
  - per tab, Chromium's own main-thread counters (Performance.getMetrics: ScriptDuration,
    LayoutDuration, RecalcStyleDuration, TaskDuration) per second.
Then one more navigation with request / websocket-frame times relative to `goto`, which shows
when the first heatmap's data and plotly's JavaScript arrived.

    python benchmarks/profile_browser.py [--tabs 4] [--seconds 20]

For the server's Python stacks add py-spy (`pip install py-spy`) and run
`py-spy record -p <streamlit pid> -d 15 -f raw -o server.txt` while this runs.
"""
from __future__ import annotations

import argparse
import re
import tempfile
import time
from pathlib import Path

import psutil
from bench_browser import HEAT, launch, open_tabs, serve  # the app server of tests/e2e
from playwright.sync_api import sync_playwright

METRICS = ("ScriptDuration", "LayoutDuration", "RecalcStyleDuration", "TaskDuration")
VIEW = {"width": 1500, "height": 1100}


def group(cmd: str) -> str | None:
    if "streamlit" in cmd:
        return "streamlit server"
    if "multiprocessing" in cmd:
        return "store writer process"
    if "collectors" in cmd:
        return "demo collector"
    if "chrom" in cmd:
        m = re.search(r"--type=([a-z-]+)", cmd)
        return "chromium " + (m.group(1) if m else "browser")
    return None


def cpu_by_group() -> dict[str, float]:
    out: dict[str, float] = {}
    for p in psutil.process_iter(["cmdline"]):
        try:
            g = group(" ".join(p.info["cmdline"] or []))
            if g is not None:
                t = p.cpu_times()
                out[g] = out.get(g, 0.0) + t.user + t.system
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return out


def metrics(cdp) -> dict[str, float]:
    return {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}


def watch(browser, url: str, tabs: int, seconds: float) -> None:
    pages = open_tabs(browser, url, tabs)
    cdps = []
    for p in pages:
        cdp = p.context.new_cdp_session(p)
        cdp.send("Performance.enable")
        cdps.append(cdp)
    time.sleep(3)
    m0, c0, t0 = [metrics(c) for c in cdps], cpu_by_group(), time.monotonic()
    last = [p.locator(HEAT).first.get_attribute("href") for p in pages]
    redraws = [0] * tabs
    while time.monotonic() - t0 < seconds:
        for i, p in enumerate(pages):
            href = p.locator(HEAT).first.get_attribute("href")
            if href != last[i]:
                redraws[i], last[i] = redraws[i] + 1, href
        pages[0].wait_for_timeout(100)
    dt = time.monotonic() - t0
    c1, m1 = cpu_by_group(), [metrics(c) for c in cdps]
    print(f"heatmap redraws/s per tab: {[round(r / dt, 2) for r in redraws]}")
    print("CPU-s per s by process group:")
    for g in sorted(c1, key=lambda k: -(c1[k] - c0.get(k, 0.0))):
        print(f"  {g:28s} {(c1[g] - c0.get(g, 0.0)) / dt:5.2f}")
    for i, (a, b) in enumerate(zip(m0, m1)):
        print(f"tab {i}: " + ", ".join(f"{k} {(b[k] - a[k]) / dt:.3f} s/s" for k in METRICS))
    for p in pages:
        p.context.close()


def navigation(browser, url: str) -> None:
    page = browser.new_page(viewport=VIEW)
    t0 = time.monotonic()
    log: list[tuple[float, str]] = []

    def note(what: str) -> None:
        log.append((time.monotonic() - t0, what))

    page.on("request", lambda r: note("request " + r.url.rsplit("/", 1)[-1][:60])
            if "Plotly" in r.url or "DataFrame" in r.url else None)
    page.on("requestfinished", lambda r: note("loaded " + r.url.rsplit("/", 1)[-1][:60])
            if "Plotly" in r.url or "DataFrame" in r.url else None)
    page.on("websocket", lambda ws: ws.on(
        "framereceived", lambda f: note(f"websocket frame of {len(f)} bytes")
        if len(f) > 10_000 else None))
    page.goto(url)
    page.wait_for_selector("h1", timeout=60_000)
    note("title shown")
    page.wait_for_selector(HEAT, timeout=120_000)
    note("first heatmap drawn")
    print("navigation (big websocket frames are figures):")
    for t, what in sorted(log):
        print(f"  {t:6.2f} s  {what}")
    page.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tabs", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=20.0)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp, serve(Path(tmp)) as url, \
            sync_playwright() as pw:
        browser = launch(pw)
        first = browser.new_page()
        first.goto(url)  # starts the collector; the measurements below see a warm server
        first.wait_for_selector(HEAT, timeout=120_000)
        first.close()
        watch(browser, url, a.tabs, a.seconds)
        navigation(browser, url)
        browser.close()


if __name__ == "__main__":
    main()
