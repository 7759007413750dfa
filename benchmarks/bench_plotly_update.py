"""What one heatmap redraw costs in Chromium: a fresh `Plotly.newPlot` (what Streamlit does on
every Live tick, because st.plotly_chart's element id includes the figure spec, so React
re-mounts the chart) against `Plotly.react` on the existing plot (what a chart that stays
mounted would do). Plain page, plotly.js from the plotly Python package (not Streamlit's
build), figures from kvviz's blockmap_figure for 1,024 cells; no Streamlit theme.

    python benchmarks/bench_plotly_update.py [--rounds 20]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

import plotly
from playwright.sync_api import sync_playwright

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "e2e"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's kvviz
from appserver import launch  # noqa: E402
from bench_heatmap import busy_map  # noqa: E402

from kvviz.viz.heatmap import blockmap_figure  # noqa: E402

JS = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"

BENCH = """async ([figs, mode]) => {
  const gd = document.getElementById('gd');
  const times = [];
  await Plotly.newPlot(gd, figs[0]);
  for (let i = 1; i < figs.length; i++) {
    await new Promise(r => requestAnimationFrame(() => setTimeout(r, 0)));
    const t0 = performance.now();
    if (mode === 'newPlot') { Plotly.purge(gd); await Plotly.newPlot(gd, figs[i]); }
    else { await Plotly.react(gd, figs[i]); }
    gd.getBoundingClientRect();  // flush layout inside the timing
    times.push(performance.now() - t0);
  }
  return times;
}"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--blocks", type=int, default=1024)
    a = ap.parse_args()
    figs = []
    for i in range(a.rounds + 1):
        f = blockmap_figure(busy_map(a.blocks, seed=i), max_cells=1024, title="paged:16")
        f.update_layout(width=560, template="none")
        figs.append(json.loads(f.to_json()))
    out = {}
    with sync_playwright() as pw:
        browser = launch(pw)
        page = browser.new_page(viewport={"width": 800, "height": 800})
        page.set_content("<div id='gd'></div>")
        page.add_script_tag(path=str(JS))
        for mode in ("newPlot", "react", "newPlot", "react"):
            t = page.evaluate(BENCH, [figs, mode])
            out.setdefault(mode, []).append(round(statistics.median(t), 1))
        browser.close()
    print(json.dumps({"blocks": a.blocks, "rounds": a.rounds, "plotly.js": "python plotly "
                      + plotly.__version__, "median_ms_per_redraw": out,
                      "load_avg_1m": round(os.getloadavg()[0], 2)}))


if __name__ == "__main__":
    main()
