"""Where one Chromium renderer's CPU goes while `--tabs` tabs watch the Live page.

Starts the app as bench_browser.py does, opens the Live page `--tabs` times (one context each),
lets them settle, then on tab 0:
  1. V8's sampling profiler (CDP `Profiler.*`) for `--seconds`: self time by function and by
     script (plotly bundle / Streamlit main bundle / other chunks / native "(program)" /
     GC / idle), and inclusive time of samples under plotly code;
  2. a Chromium trace (devtools.timeline + v8 categories) for `--seconds`: self time on the
     renderer main thread by event (Layout, UpdateLayoutTree = recalc style, Paint, GC, ...);
  3. over both windows: CPU-s per s of every renderer thread group (/proc/PID/task/*/comm),
     summed over all renderers, and per tab Performance.getMetrics counters.

    python benchmarks/profile_renderer.py [--tabs 4] [--seconds 15] [--interval-us 250]
           [--json OUT.json]
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import re
import tempfile
import time
from pathlib import Path

import psutil
from bench_browser import HEAT, OBSERVE, launch, open_tabs, serve  # the app server of tests/e2e
from playwright.sync_api import sync_playwright

METRICS = ("ScriptDuration", "LayoutDuration", "RecalcStyleDuration", "TaskDuration")
TRACE_CATEGORIES = ["devtools.timeline", "disabled-by-default-devtools.timeline", "v8",
                    "blink", "cc", "gpu", "toplevel", "disabled-by-default-v8.gc"]
CLK = os.sysconf("SC_CLK_TCK")


def script_group(url: str, fn: str) -> str:
    if not url:
        return fn if fn.startswith("(") else "(native/builtin)"
    name = url.rsplit("/", 1)[-1]
    if "Plotly" in name or "plotly" in name:
        return "plotly chunk: " + name.split(".")[0]
    if name.startswith("index.") or name.startswith("main."):
        return "streamlit main bundle: " + name
    return "other: " + name[:60]


def renderer_threads() -> dict[str, float]:
    """CPU seconds by thread name (digits stripped), summed over every chromium renderer."""
    out: dict[str, float] = collections.defaultdict(float)
    for p in psutil.process_iter(["cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if "chrom" not in cmd or "--type=renderer" not in cmd:
            continue
        for task in Path(f"/proc/{p.pid}/task").glob("*"):
            try:
                comm = (task / "comm").read_text().strip()
                f = (task / "stat").read_text().rsplit(")", 1)[1].split()
                out[re.sub(r"\d+$", "", comm)] += (int(f[11]) + int(f[12])) / CLK
            except (OSError, IndexError):
                continue
    return out


def chromium_cpu() -> dict[str, float]:
    out: dict[str, float] = collections.defaultdict(float)
    for p in psutil.process_iter(["cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        try:
            t = p.cpu_times()
        except psutil.Error:
            continue
        if "chrom" in cmd:
            m = re.search(r"--type=([a-z-]+)", cmd)
            out["chromium " + (m.group(1) if m else "browser")] += t.user + t.system
        elif "streamlit" in cmd:
            out["streamlit server"] += t.user + t.system
        elif "collectors" in cmd or "multiprocessing" in cmd:
            out["collector (+writer)"] += t.user + t.system
    return out


def metrics(cdp) -> dict[str, float]:
    return {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}


def cpu_profile(cdp, seconds: float, interval_us: int) -> dict:
    cdp.send("Profiler.enable")
    cdp.send("Profiler.setSamplingInterval", {"interval": interval_us})
    cdp.send("Profiler.start")
    time.sleep(seconds)
    prof = cdp.send("Profiler.stop")["profile"]
    cdp.send("Profiler.disable")
    return prof


def summarise_profile(prof: dict, top: int) -> dict:
    nodes = {n["id"]: n for n in prof["nodes"]}
    parent = {}
    for n in prof["nodes"]:
        for c in n.get("children", []):
            parent[c] = n["id"]
    self_t: dict[int, float] = collections.defaultdict(float)
    for sid, dt in zip(prof["samples"], prof["timeDeltas"]):
        self_t[sid] += dt / 1e6
    total = sum(self_t.values())
    by_fn: dict[tuple, float] = collections.defaultdict(float)
    by_url: dict[str, float] = collections.defaultdict(float)
    incl_url: dict[str, float] = collections.defaultdict(float)  # samples with a frame in url
    incl_fn: dict[tuple, float] = collections.defaultdict(float)
    for nid, t in self_t.items():
        cf = nodes[nid]["callFrame"]
        fn = cf["functionName"] or "(anonymous)"
        grp = script_group(cf["url"], fn)
        by_fn[(fn, grp, cf.get("lineNumber", -1) + 1, cf.get("columnNumber", -1) + 1)] += t
        by_url[grp] += t
        seen_g, seen_f = set(), set()
        k = nid
        while k is not None:
            f = nodes[k]["callFrame"]
            g = script_group(f["url"], f["functionName"] or "(anonymous)")
            seen_g.add(g)
            seen_f.add((f["functionName"] or "(anonymous)", g, f.get("lineNumber", -1) + 1,
                        f.get("columnNumber", -1) + 1))
            k = parent.get(k)
        for g in seen_g:
            incl_url[g] += t
        for f in seen_f:
            incl_fn[f] += t
    busy = total - by_url.get("(idle)", 0.0)

    def rows(d, n):
        return [{"name": k if isinstance(k, str) else
                 f"{k[0]} [{k[1]}:{k[2]}:{k[3]}]", "s": round(v, 3),
                 "pct_of_busy": round(100 * v / busy, 1) if busy else None}
                for k, v in sorted(d.items(), key=lambda kv: -kv[1])[:n]]

    return {"sampled_s": round(total, 2), "busy_s": round(busy, 2),
            "self_by_script": rows(by_url, 40), "self_by_function": rows(by_fn, top),
            "inclusive_by_script": rows(incl_url, 40),
            "inclusive_by_function": rows(incl_fn, top)}


def read_trace(path: Path) -> list[dict]:
    data = json.loads(path.read_text())
    return data["traceEvents"] if isinstance(data, dict) else data


def summarise_trace(events: list[dict], seconds: float) -> dict:
    """Self time per event name on each renderer main thread (nesting by ts/dur)."""
    pid_frames = {}
    tnames = {}
    for e in events:
        if e.get("name") == "thread_name" and e.get("ph") == "M":
            tnames[(e["pid"], e["tid"])] = e["args"]["name"]
        if e.get("name") == "TracingStartedInBrowser":
            for fr in e.get("args", {}).get("data", {}).get("frames", []):
                if "processId" in fr:
                    pid_frames[fr["processId"]] = fr.get("url", "")
    main = {k for k, v in tnames.items() if v == "CrRendererMain"}
    target = {k for k in main if k[0] in pid_frames} or main
    per: dict[str, float] = collections.defaultdict(float)
    other_threads: dict[str, float] = collections.defaultdict(float)
    by_thread: dict[tuple, list] = collections.defaultdict(list)
    for e in events:
        ph = e.get("ph")
        if ph == "X" and "dur" in e:
            by_thread[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"], e["name"]))
    for key, evs in by_thread.items():
        evs.sort(key=lambda x: (x[0], -x[1]))
        stack: list[list] = []  # [end, name, child_time, start]
        selfs: dict[str, float] = collections.defaultdict(float)
        for s, en, name in [*evs, (float("inf"), float("inf"), None)]:
            while stack and stack[-1][0] <= s:
                end, done, child, start = stack.pop()
                selfs[done] += (end - start) - child
                if stack:
                    stack[-1][2] += end - start
            if name is not None:
                stack.append([en, name, 0.0, s])
        if key in target:
            for n, v in selfs.items():
                per[n] += v / 1e6
        elif key[0] in {t[0] for t in target}:
            tn = tnames.get(key, str(key[1]))
            for n, v in selfs.items():
                other_threads[f"{tn}: {n}"] += v / 1e6
    top = sorted(per.items(), key=lambda kv: -kv[1])[:30]
    topo = sorted(other_threads.items(), key=lambda kv: -kv[1])[:15]
    return {"renderer_main_self_s_per_s": {k: round(v / seconds, 4) for k, v in top},
            "renderer_other_threads_self_s_per_s": {k: round(v / seconds, 4) for k, v in topo},
            "traced_pids": sorted({t[0] for t in target})}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tabs", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--interval-us", type=int, default=250)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--cpuprofile", type=Path, default=None,
                    help="also save tab 0's raw V8 profile (opens in DevTools)")
    ap.add_argument("--no-trace", action="store_true", help="profile phase only")
    a = ap.parse_args()
    report: dict = {}
    with tempfile.TemporaryDirectory() as tmp, serve(Path(tmp)) as url, \
            sync_playwright() as pw:
        browser = launch(pw)
        first = browser.new_page()
        first.goto(url)
        first.wait_for_selector(HEAT, timeout=120_000)
        first.close()
        pages = open_tabs(browser, url, a.tabs)
        cdps = []
        for p in pages:
            p.evaluate(OBSERVE)
            c = p.context.new_cdp_session(p)
            c.send("Performance.enable")
            cdps.append(c)
        time.sleep(3)
        for phase in ("profile",) if a.no_trace else ("profile", "trace"):
            m0, th0, cpu0, t0 = ([metrics(c) for c in cdps], renderer_threads(),
                                 chromium_cpu(), time.monotonic())
            n0 = [p.evaluate("() => window.__kvRedraws.length") for p in pages]
            if phase == "profile":
                prof = cpu_profile(cdps[0], a.seconds, a.interval_us)
            else:
                browser.start_tracing(page=pages[0], path=str(Path(tmp) / "trace.json"),
                                      categories=TRACE_CATEGORIES)
                time.sleep(a.seconds)
            dt = time.monotonic() - t0
            m1, th1, cpu1 = [metrics(c) for c in cdps], renderer_threads(), chromium_cpu()
            n1 = [p.evaluate("() => window.__kvRedraws.length") for p in pages]
            if phase == "trace":
                browser.stop_tracing()  # serialising the trace takes long: not in the window
                events = read_trace(Path(tmp) / "trace.json")
            report[phase] = {
                "seconds": round(dt, 1),
                "redraws_per_s": [round((b - x) / dt, 2) for x, b in zip(n0, n1)],
                "cpu_s_per_s": {k: round((cpu1[k] - cpu0.get(k, 0)) / dt, 3)
                                for k in sorted(cpu1, key=lambda k: -(cpu1[k] - cpu0.get(k, 0)))},
                "renderer_threads_cpu_s_per_s": {
                    k: round((th1[k] - th0.get(k, 0)) / dt, 3)
                    for k in sorted(th1, key=lambda k: -(th1[k] - th0.get(k, 0)))
                    if th1[k] - th0.get(k, 0) > 0.005},
                "per_tab_metrics_s_per_s": [
                    {k: round((y[k] - x[k]) / dt, 3) for k in METRICS} for x, y in zip(m0, m1)],
            }
        report["profile"]["v8"] = summarise_profile(prof, a.top)
        if a.cpuprofile:
            a.cpuprofile.write_text(json.dumps(prof))
        if not a.no_trace:
            report["trace"]["timeline"] = summarise_trace(events, a.seconds)
        for p in pages:
            p.context.close()
        browser.close()
    text = json.dumps(report, indent=1)
    if a.json:
        a.json.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
