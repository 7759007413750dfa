"""The dashboard's costs: the heatmap builders, and the Live page in Chromium.

    python benchmarks/bench_dashboard.py heatmap [--repeats 20] [--json]
    python benchmarks/bench_dashboard.py browser [--seconds 30] [--tabs 4] [--json]
    python benchmarks/bench_dashboard.py longrun [--minutes 120] [--tabs 2]
                                         [--checkpoints 5,30,60,120] [--json]

heatmap: blockmap_cells / blockmap_figure (plotly: Replay, Node) and canvas_data (the Live
page's canvas, plus the Arrow bytes Streamlit makes of its cells) for 4k .. 1M blocks; target
1M blocks in <= 50 ms. browser: starts the app as the README says (temporary runs dir, the
demo collector), times navigation to the first Live heatmap (cold, then warm x5), then the
1 Hz refresh with `--tabs` tabs (one browser context each) over `--seconds`: per tab
`updates_per_s` (repaints of the first heatmap, counted in the page by a MutationObserver on
the canvas root's data-draws, kvviz/viz/blockcanvas.js) and `ticks_per_s` (distinct panel
runs shown: the "t = ... s" caption), and CPU seconds per second of Chromium's renderers,
the server and the collector.
longrun: the app as above with `--tabs` Live tabs left open for `--minutes` (the demo
collector loops); at each checkpoint (minutes) a 60 s window: per tab ticks/s and repaints/s,
the server's CPU seconds per Live tick (server CPU s/s over the ticks/s of all tabs: the
per-tick cost), the RSS of the Streamlit server and of the collector, and the runs
directory's size on disk (recording + WAL).
"""
from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import harness
import numpy as np
import psutil
import pyarrow as pa

from kvviz.core.blockmap import FREE, BlockMap

sys.path.insert(0, str(harness.ROOT / "tests" / "e2e"))  # appserver: how the tests start it


def busy_map(n: int, seed: int = 0) -> BlockMap:
    """Sequences of 1..64 blocks, holes between them, partly written last blocks, sharing."""
    rng = np.random.default_rng(seed)
    owner = np.full(n, FREE, np.int32)
    filled = np.zeros(n, np.int32)
    i, seq = 0, 0
    while i < n:
        run = int(rng.integers(1, 65))
        if rng.random() < 0.7:
            owner[i:i + run] = seq
            filled[i:i + run] = 16
            filled[min(n, i + run) - 1] = int(rng.integers(0, 17))
            seq += 1
        i += run
    owned = owner != FREE
    refcount = np.where(owned, np.where(rng.random(n) < 0.05, 2, 1), 0).astype(np.int16)
    return BlockMap(owner, filled, np.where(owned, 16, 0).astype(np.int32), refcount,
                    ~owned & (rng.random(n) < 0.1), 16, 0, "paged:16", False)


def arrow_bytes(data: dict) -> bytes:
    """The cells as an Arrow IPC stream, as Streamlit sends a component's DataFrame."""
    table = pa.Table.from_pandas(data["cells"])
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue().to_pybytes()


def heatmap(a) -> None:
    from kvviz.viz.blockcanvas import canvas_data
    from kvviz.viz.heatmap import blockmap_cells, blockmap_figure

    sizes = (4096, 65_536) if a.quick else (4096, 65_536, 262_144, 1 << 20)
    for n in sizes:
        bm = busy_map(n)
        fig = blockmap_figure(bm)
        ms = {k: 1e3 * harness.median_s(fn, a.repeats) for k, fn in {
            "cells_ms": lambda bm=bm: blockmap_cells(bm),
            "figure_ms": lambda bm=bm: blockmap_figure(bm),
            "canvas_ms": lambda bm=bm: canvas_data(bm),
            "canvas_arrow_ms": lambda bm=bm: arrow_bytes(canvas_data(bm))}.items()}
        harness.emit(a, {"bench": "heatmap", "blocks": n,
                         "cells": int(np.asarray(fig.data[0].z).size), **ms,
                         "figure_json_kb": len(fig.to_json()) / 1024,
                         "canvas_arrow_kb": len(arrow_bytes(canvas_data(bm))) / 1024})


HEAT = ".kvmap canvas[role=img]"  # the Live heatmap (kvviz.viz.blockcanvas)
DRAWS = ".kvmap"  # its root: data-draws counts repaints


def first_heatmap_s(browser, url: str) -> float:
    page = browser.new_page(viewport={"width": 1500, "height": 1100})
    t0 = time.monotonic()
    page.goto(url)
    page.wait_for_selector(HEAT, timeout=120_000)
    dt = time.monotonic() - t0
    page.close()
    return dt


# Counts, inside the page, every repaint of the first heatmap (its root's data-draws
# attribute): polling from Python misses repaints that come closer together than one polling
# round over all tabs, which under load is longer than a second.
OBSERVE = """() => {
  window.__kvRedraws = [];
  const root = document.querySelector('.kvmap');
  if (window.__kvObs) window.__kvObs.disconnect();  // installed again: replace, not add
  window.__kvObs = new MutationObserver(() => window.__kvRedraws.push(performance.now()));
  window.__kvObs.observe(root, {attributes: true, attributeFilter: ['data-draws']});
  // Distinct panel runs shown: the caption "t = ... s" changes once per fragment run.
  window.__kvTicks = 0;
  let lastT = null;
  if (window.__kvTimer) clearInterval(window.__kvTimer);
  window.__kvTimer = setInterval(() => {
    const cap = [...document.querySelectorAll('[data-testid="stCaptionContainer"]')]
      .find(e => e.textContent.startsWith('t = '));
    const t = cap ? cap.textContent : null;
    if (t !== null && t !== lastT) { if (lastT !== null) window.__kvTicks++; lastT = t; }
  }, 100);
}"""


def open_tabs(browser, url: str, tabs: int) -> list:
    """`tabs` Live pages, one browser context each (separate sessions, each rendering as if
    visible), returned once each shows a heatmap."""
    pages = [browser.new_context(viewport={"width": 1500, "height": 1100}).new_page()
             for _ in range(tabs)]
    for p in pages:
        p.goto(url)
    for p in pages:
        p.wait_for_selector(HEAT, timeout=90_000, state="attached")
    return pages


def cpu_seconds() -> dict[str, float]:
    """CPU seconds so far: Chromium renderers, the Streamlit server, the demo collector."""
    out = {"renderers": 0.0, "server": 0.0, "collector": 0.0}
    for p in psutil.process_iter(["cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        g = ("renderers" if "chrom" in cmd and "--type=renderer" in cmd else
             "server" if "streamlit" in cmd else
             "collector" if "collectors" in cmd or "multiprocessing" in cmd else None)
        if g is not None:
            try:
                t = p.cpu_times()
                out[g] += t.user + t.system
            except psutil.Error:
                continue
    return out


def refresh_rates(browser, url: str, tabs: int, seconds: float,
                  cpu: dict | None = None) -> list[dict]:
    pages = open_tabs(browser, url, tabs)
    for p in pages:
        p.evaluate(OBSERVE)
    c0 = cpu_seconds()
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        pages[0].wait_for_timeout(200)
    dt = time.monotonic() - t0
    c1 = cpu_seconds()
    if cpu is not None:
        cpu.update({k: round((c1[k] - c0[k]) / dt, 3) for k in c1})
        cpu["load_avg_1m"] = round(os.getloadavg()[0], 2)
    out = []
    for p in pages:
        times = [x / 1000 for x in p.evaluate("() => window.__kvRedraws")]
        gaps = [b - a for a, b in zip(times, times[1:])]
        ticks = p.evaluate("() => window.__kvTicks")
        out.append({"updates_per_s": round(len(times) / dt, 2),
                    "ticks_per_s": round(ticks / dt, 2),
                    "median_gap_s": round(statistics.median(gaps), 2) if gaps else None,
                    "max_gap_s": round(max(gaps), 2) if gaps else None})
    for p in pages:
        p.context.close()
    return out


def browser(a) -> None:
    from appserver import launch, serve
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp, serve(Path(tmp)) as url, \
            sync_playwright() as pw:
        b = launch(pw)
        cold = first_heatmap_s(b, url)  # fresh server: includes starting the collector
        warm = [first_heatmap_s(b, url) for _ in range(2 if a.quick else 5)]
        cpu: dict = {}
        tabs = refresh_rates(b, url, a.tabs, 5.0 if a.quick else a.seconds, cpu)
        b.close()
    harness.emit(a, {"bench": "browser", "cold_first_heatmap_s": cold,
                     "warm_first_heatmap_s_median": statistics.median(warm),
                     "warm_first_heatmap_s_max": max(warm), "tabs": a.tabs,
                     "seconds": a.seconds, "per_tab": tabs, "cpu_s_per_s": cpu})


def server_tree(url: str) -> tuple[psutil.Process, list[psutil.Process]]:
    """This benchmark's Streamlit server (found by its port) and its descendants (the demo
    collector and its writer): other servers on the machine are not counted."""
    port = url.rsplit(":", 1)[1]
    for p in psutil.process_iter(["cmdline"]):
        cmd = p.info["cmdline"] or []
        if "streamlit" in " ".join(cmd) and port in cmd:
            return p, p.children(recursive=True)
    raise RuntimeError(f"no Streamlit server on port {port}")


def tree_usage(url: str) -> dict[str, float]:
    """CPU seconds so far and resident MiB of the server and of its children (collector)."""
    server, kids = server_tree(url)
    out = {"server_cpu": 0.0, "collector_cpu": 0.0, "server_rss_mb": 0.0,
           "collector_rss_mb": 0.0}
    for p, who in [(server, "server"), *((k, "collector") for k in kids)]:
        try:
            t = p.cpu_times()
            out[f"{who}_cpu"] += t.user + t.system
            out[f"{who}_rss_mb"] += p.memory_info().rss / 2**20
        except psutil.Error:
            continue
    return out


def dir_mb(path: Path) -> float:
    return round(sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20, 2)


def checkpoint(pages: list, minute: float, window: float, runs: Path, url: str) -> dict:
    for p in pages:  # observe afresh: the canvas root may have been re-mounted since
        p.evaluate(OBSERVE)
    c0 = tree_usage(url)
    t0 = time.monotonic()
    while time.monotonic() - t0 < window:
        pages[0].wait_for_timeout(500)
    dt = time.monotonic() - t0
    c1 = tree_usage(url)
    ticks = [p.evaluate("() => window.__kvTicks") / dt for p in pages]
    draws = [len(p.evaluate("() => window.__kvRedraws")) / dt for p in pages]
    server = (c1["server_cpu"] - c0["server_cpu"]) / dt
    return {"minute": minute, "window_s": round(dt, 1),
            "ticks_per_s": [round(x, 2) for x in ticks],
            "updates_per_s": [round(x, 2) for x in draws],
            "server_cpu_s_per_s": round(server, 3),
            "collector_cpu_s_per_s": round((c1["collector_cpu"] - c0["collector_cpu"]) / dt, 3),
            "server_cpu_ms_per_tick": round(1000 * server / sum(ticks), 1) if sum(ticks)
            else None,
            "server_rss_mb": round(c1["server_rss_mb"], 1),
            "collector_rss_mb": round(c1["collector_rss_mb"], 1), "runs_dir_mb": dir_mb(runs),
            "load_avg_1m": round(os.getloadavg()[0], 2)}


def longrun(a) -> None:
    from appserver import launch, serve
    from playwright.sync_api import sync_playwright

    marks = sorted(float(x) for x in a.checkpoints.split(",") if float(x) <= a.minutes)
    with tempfile.TemporaryDirectory() as tmp, serve(Path(tmp)) as url, \
            sync_playwright() as pw:
        b = launch(pw)
        pages = open_tabs(b, url, a.tabs)
        for p in pages:
            p.evaluate(OBSERVE)
        start = time.monotonic()
        for m in marks:
            while time.monotonic() - start < m * 60 - 60:
                pages[0].wait_for_timeout(5000)
            row = checkpoint(pages, m, 60.0, Path(tmp), url)
            harness.emit(a, {"bench": "longrun", "tabs": a.tabs, **row},
                         f"{m:>6g} min: ticks/s {row['ticks_per_s']}, server "
                         f"{row['server_cpu_ms_per_tick']} CPU-ms/tick, server RSS "
                         f"{row['server_rss_mb']} MiB, collector RSS "
                         f"{row['collector_rss_mb']} MiB, runs dir {row['runs_dir_mb']} MB, "
                         f"load {row['load_avg_1m']}")
        b.close()


def main() -> None:
    ap = harness.parser(__doc__, repeats=20)
    ap.add_argument("case", choices=["heatmap", "browser", "longrun"])
    ap.add_argument("--seconds", type=float, default=30.0, help="browser: refresh window")
    ap.add_argument("--tabs", type=int, default=4, help="browser: Live tabs at once")
    ap.add_argument("--minutes", type=float, default=120.0, help="longrun: how long")
    ap.add_argument("--checkpoints", default="5,30,60,120",
                    help="longrun: minutes at which to measure (each a 60 s window ending there)")
    a = ap.parse_args()
    {"heatmap": heatmap, "browser": browser, "longrun": longrun}[a.case](a)


if __name__ == "__main__":
    main()
