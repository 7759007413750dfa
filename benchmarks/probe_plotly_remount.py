"""Does each 1-s Live tick re-mount / newPlot the heatmap, or Plotly.react-update it, and how
many times does plotly draw a heatmap per tick? Counts, in one tab over `--seconds`: graph
divs removed (re-mounts), new `svg.main-svg` elements (newPlot re-creates them), heatmap draws
(`heatmapDraws`: canvas.toDataURL calls, one per heatmap draw: newPlot, auto-margin redraw,
full replot), the first heatmap's redraws as bench_browser counts them, and whether the first
chart survives. 2 heatmaps at 1 Hz: heatmapDraws / seconds / 2 = draws per chart per tick.
    python benchmarks/probe_plotly_remount.py [--seconds 10] [--tabs 1]"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from bench_browser import OBSERVE, launch, open_tabs, serve
from playwright.sync_api import sync_playwright

PROBE = """() => {
  window.__kvProbe = {mainSvg: 0, gdAdded: 0, gdRemoved: 0,
                      heatmapDraws: 0};
  // plotly draws a heatmap on a canvas and hands it over as a data URL: one call per draw
  const toDataURL = HTMLCanvasElement.prototype.toDataURL;
  HTMLCanvasElement.prototype.toDataURL = function (...a) {
    window.__kvProbe.heatmapDraws++;
    return toDataURL.apply(this, a);
  };
  const gd = document.querySelector('.js-plotly-plot');
  gd.__kvMark = 1;
  window.__kvFirstGd = gd;
  new MutationObserver((muts) => {
    for (const m of muts) {
      for (const n of m.addedNodes) {
        if (!(n instanceof Element)) continue;
        if (n.matches('svg.main-svg')) window.__kvProbe.mainSvg++;
        if (n.matches('.js-plotly-plot') || n.querySelector('.js-plotly-plot'))
          window.__kvProbe.gdAdded++;
      }
      for (const n of m.removedNodes) {
        if (!(n instanceof Element)) continue;
        if (n.matches('.js-plotly-plot') || n.querySelector('.js-plotly-plot'))
          window.__kvProbe.gdRemoved++;
      }
    }
  }).observe(document.body, {subtree: true, childList: true});
}"""
RESULT = """() => ({...window.__kvProbe,
  firstGdStillInDoc: document.contains(window.__kvFirstGd),
  charts: document.querySelectorAll('.js-plotly-plot').length,
  redraws: window.__kvRedraws.length})"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--tabs", type=int, default=1)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp, serve(Path(tmp)) as url, \
            sync_playwright() as pw:
        browser = launch(pw)
        pages = open_tabs(browser, url, a.tabs)
        p = pages[0]
        p.wait_for_timeout(7000)  # past the history fragment's first tick
        p.evaluate(OBSERVE)
        p.evaluate(PROBE)
        time.sleep(a.seconds)
        print(json.dumps(p.evaluate(RESULT)))
        browser.close()


if __name__ == "__main__":
    main()
