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
