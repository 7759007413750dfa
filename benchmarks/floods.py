"""The `floods` case of bench_inputs.py: `kvviz events` against a hostile node.

Each row starts tests/fuzz/hostile_zmq.py's HostileNode (PUB + ROUTER on 127.0.0.1, served by
threads of this process) and `python -m kvviz events` as a child recording it, sends the child
SIGTERM `seconds` after its recording exists, and reports the child's peak RSS (wait4's
ru_maxrss of that child alone), the time from SIGTERM to its exit, its exit code, and the rows
its recording holds.
"""
from __future__ import annotations

import sqlite3
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.fuzz.hostile_zmq

MB = 1 << 20
# name -> (publisher kind, router kind, HostileNode options, extra kvviz events flags)
CASES = {
    "flood: distinct 100-event batches, one thread, as fast as it can": (
        "flood", "none", {"flood_events": 100}, []),
    "flood of 1000-event batches, gaps replayed from a flooding ROUTER": (
        "flood", "flood", {"flood_events": 1000}, []),
    "valid 100 MB batches (default --max-message-mb 16)": (
        "big-batch", "none", {"big_bytes": 100 * MB}, []),
    "valid 16 MB batches of 2-byte hashes (the typed decoder's worst, at the cap)": (
        "worst-batch", "none", {"big_bytes": 16 * MB - 1024}, []),
    "16 MB batches of empty arrays (outside the typed layouts, at the cap)": (
        "generic-bomb", "none", {"big_bytes": 16 * MB - 1024}, []),
    "50 MB topic frames": ("big-topic", "none", {"big_bytes": 50 * MB}, []),
    "a gap on every message, ROUTER answers 50 MB frames forever": (
        "gaps", "big", {"big_bytes": 50 * MB}, []),
    "a gap on every message, ROUTER never answers": ("gaps", "silent", {}, []),
    "a gap on every message, ROUTER floods answers, no end marker": ("gaps", "flood", {}, []),
    "silence (PUB and ROUTER bound, nothing sent)": ("silent", "silent", {}, []),
}


def run(name: str, seconds: float, tmp: Path) -> dict:
    from tests.fuzz.hostile_zmq import HostileNode, run_events

    pub, router, opts, extra = CASES[name]
    node = HostileNode(pub, router, **opts)
    out = tmp / f"flood-{abs(hash(name))}.db"
    argv = [node.endpoint, "--quiet", "--out", str(out), *extra]
    if node.replay:
        argv += ["--replay", node.replay]
    t0 = time.monotonic()
    try:
        res = run_events(argv, signal_after_s=seconds, limit_s=120, ready=out)
    finally:
        node.close()
    offered = node.events_sent / max(1e-9, time.monotonic() - t0) if pub == "flood" else None
    rows = ok = 0
    if out.exists():
        conn = sqlite3.connect(f"file:{out}?mode=ro", uri=True)
        rows, ok = conn.execute("SELECT COUNT(*), COALESCE(SUM(status = 'ok'), 0) "
                                "FROM kv_batches").fetchone()
        conn.close()
    return {"bench": "floods", "input": name, "seconds": seconds, "exit": res.code,
            "peak_rss_mb": round(res.peak_rss_mb), "sigterm_to_exit_s": round(res.wall_s, 2),
            "rows": rows, "ok_rows": ok, "messages_sent": node.sent,
            "offered_events_per_s": None if offered is None else round(offered),
            "stderr": res.stderr.strip()[-200:]}


# Round 3 (issue 40): runs that must be refused before anything is allocated, and attach
# against a hostile /metrics. name -> (command, argv with {out} and {url}, SIGTERM after (s)
# or None: the run ends by itself)
PAGED_1 = [a for _ in range(20) for a in ("--lane", "paged:1")]
ROUND3 = {
    "collect --mode sim, 20 x --lane paged:1 at --capacity-tokens 16777216": (
        "collect", ["--mode", "sim", "--capacity-tokens", "16777216", *PAGED_1,
                    "--duration", "15", "--out", "{out}"], None),
    "collect --mode real --model llama-3-8b --capacity-tokens 1000000": (
        "collect", ["--mode", "real", "--model", "llama-3-8b", "--capacity-tokens",
                    "1000000", "--duration", "15", "--out", "{out}"], None),
    "simulate --requests 10000000 --rate inf": (
        "simulate", ["--requests", "10000000", "--rate", "inf"], None),
    "attach, /metrics of 1.6M tiny series (17 MB), SIGTERM": (
        "attach", ["{url}/metrics", "--timeout", "30", "--out", "{out}", "--quiet"], True),
    "attach, /metrics of 45,000 series of long labels (27 MB, ~40 s to parse), SIGTERM": (
        "attach", ["{url}/heavy", "--timeout", "30", "--out", "{out}", "--quiet"], True),
    "attach, /metrics dripped a byte every 0.2 s, SIGTERM": (
        "attach", ["{url}/drip", "--timeout", "30", "--out", "{out}", "--quiet"], True),
    "attach --duration 5, the 27 MB body": (
        "attach", ["{url}/heavy", "--timeout", "30", "--duration", "5", "--out", "{out}",
                   "--quiet"], None),
}


def floods_table(a, tmp: Path, emit) -> None:
    """bench_inputs.py floods: the rows (--only, --seconds), as JSON lines or the Markdown
    table of docs/RELIABILITY.md."""
    rows = [run(name, a.seconds, tmp) for name in CASES if a.only in name]
    if a.json:
        for r in rows:
            emit(a, r)
    else:
        print("| input | offered events/s | peak RSS | SIGTERM to exit | exit | rows recorded |")
        print("|---|---:|---:|---:|---:|---:|")
        for r in rows:
            rate = "" if r["offered_events_per_s"] is None else f"{r['offered_events_per_s']:,}"
            print(f"| {r['input']} | {rate} | {r['peak_rss_mb']} MB | "
                  f"{r['sigterm_to_exit_s']:.2f} s | {r['exit']} | {r['rows']:,} "
                  f"({r['ok_rows']:,} decoded) |")


def run_round3(name: str, seconds: float, tmp: Path) -> dict:
    """One ROUND3 row: the child's exit, peak RSS (its own) and the time from SIGTERM to its
    exit (or from its start, for a run that ends by itself), and its recording's status."""
    from tests.fuzz.hostile_http import Hostile
    from tests.fuzz.hostile_zmq import run_events

    command, argv, term = ROUND3[name]
    node = Hostile() if command == "attach" else None
    out = tmp / f"r3-{abs(hash(name))}.db"
    argv = [a.format(out=out, url=node.url if node else "") for a in argv]
    try:
        res = run_events(argv, signal_after_s=seconds if term else None, limit_s=180,
                         ready=out if term else None, command=command)
    finally:
        if node is not None:
            node.server.shutdown()
            node.server.server_close()
    status = None
    if out.exists():
        conn = sqlite3.connect(f"file:{out}?mode=ro", uri=True)
        status = conn.execute("SELECT status FROM run").fetchone()[0]
        conn.close()
    return {"bench": "round3", "input": name, "exit": res.code,
            "peak_rss_mb": round(res.peak_rss_mb), "seconds": round(res.wall_s, 2),
            "timed": "SIGTERM to exit" if term else "start to exit", "status": status,
            "stderr": res.stderr.strip().splitlines()[-1][:300] if res.stderr.strip() else ""}


def big_recording(path: Path, samples: int) -> Path:
    """A recording of `samples` sample rows (~23 h of the default demo at 10^6): a small real
    run whose last sample row is repeated with later times and steps, in one SQL statement."""
    from tests.fuzz.hostile import make_recording

    make_recording(path)
    with sqlite3.connect(path) as conn:
        cols = [r[1] for r in conn.execute("PRAGMA table_info(samples)")][1:]
        rest = ", ".join(c for c in cols if c not in ("t", "step"))
        conn.execute(f"""WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n
                         WHERE i < ?) INSERT INTO samples (t, step, {rest})
                         SELECT s.t + n.i * 0.25, s.step + n.i, {', '.join(
                             f's.{c}' for c in cols if c not in ('t', 'step'))}
                         FROM n, (SELECT * FROM samples ORDER BY sample_id DESC LIMIT 1) s""",
                     (samples,))
    return path


def run_export(samples: int, tmp: Path) -> dict:
    """`kvviz export --csv` of big_recording(samples): exit, the child's peak RSS, wall time."""
    from tests.fuzz.hostile_zmq import run_events

    rec = big_recording(tmp / f"big-{samples}.db", samples)
    res = run_events([str(rec), "--csv", str(tmp / f"big-{samples}-csv"), "--maps", "none"],
                     limit_s=600, command="export")
    return {"bench": "round3", "input": f"export --csv of {samples:,} samples", "exit": res.code,
            "peak_rss_mb": round(res.peak_rss_mb), "seconds": round(res.wall_s, 2),
            "timed": "start to exit", "status": None,
            "stderr": res.stderr.strip().splitlines()[-1][:300] if res.stderr.strip() else ""}


def round3_table(a, tmp: Path, emit) -> None:
    """bench_inputs.py round3: the rows (--only, --samples, --seconds), as JSON lines or the
    Markdown table of docs/RELIABILITY.md."""
    rows = [run_round3(name, a.seconds, tmp) for name in ROUND3 if a.only in name]
    if "export" in a.only:  # a long recording: minutes to build and export, so asked for
        rows.append(run_export(a.samples, tmp))
    if "events" in a.only:  # the same, 10^7 engine events: export (both formats) and verify
        from long_recording import run_events as long_events

        rows += long_events(a.engine_events, tmp)
    if a.json:
        for r in rows:
            emit(a, r)
        return
    print("| input | exit | peak RSS | time | status | last line |")
    print("|---|---:|---:|---:|---|---|")
    for r in rows:
        print(f"| {r['input']} | {r['exit']} | {r['peak_rss_mb']} MB | {r['seconds']:.2f} s "
              f"({r['timed']}) | {r['status'] or 'no file'} | {r['stderr'][:120]} |")
