"""`bench_inputs.py round3 --only events`: export and verify a recording of many engine events.

The recording (tests/fuzz/many_events.py) is written through the store's own writer: one
paged lane, 1000 events a sample (admitted and finished in event_chunks, evicted and
admit_failed rows of `events`), its counters following from them, so the verifier finds it
clean (exit 0) and has to replay every event to say so.

Each command runs under `/usr/bin/time -f %M` (its peak RSS, KiB); time is the wall clock
from its start to its exit, the interpreter's start included.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.fuzz.many_events


def measured(argv: list[str]) -> dict:
    """`argv` under /usr/bin/time -f %M: exit, peak RSS (MB), wall seconds, last line."""
    t0 = time.perf_counter()
    r = subprocess.run(["/usr/bin/time", "-f", "%M", *argv], capture_output=True, text=True,
                       cwd=ROOT, stdin=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    err = [ln for ln in r.stderr.strip().splitlines()
           if not ln.startswith("Command exited with non-zero status")]  # /usr/bin/time's
    rss = int(err.pop()) / 1024 if err and err[-1].isdigit() else float("nan")
    lines = err or r.stdout.strip().splitlines() or [""]
    return {"exit": r.returncode, "peak_rss_mb": round(rss), "seconds": round(wall, 2),
            "stderr": lines[-1][:300]}


def run_events(events: int, tmp: Path) -> list[dict]:
    """Rows of the round-3 table: export --csv, export --parquet and the verifier on a
    recording of `events` engine events."""
    from tests.fuzz.many_events import events_recording

    t0 = time.perf_counter()
    rec = events_recording(tmp / f"events-{events}.db", events)
    built = time.perf_counter() - t0
    mb = rec.stat().st_size / 2**20
    py = sys.executable
    runs = {"export --csv": [py, "-m", "kvviz", "export", str(rec), "--csv", str(tmp / "ev-csv")],
            "export --parquet": [py, "-m", "kvviz", "export", str(rec), "--parquet",
                                 str(tmp / "ev-pq")],
            "python -m kvviz.verify": [py, "-m", "kvviz.verify", str(rec)]}
    rows = []
    for name, argv in runs.items():
        out = measured(argv)
        rows.append({"bench": "round3", "input": f"{name} of {events:,} engine events "
                     f"({mb:.0f} MB recording, built in {built:.0f} s)", **out,
                     "timed": "start to exit", "status": None})
        for d in ("ev-csv", "ev-pq"):
            shutil.rmtree(tmp / d, ignore_errors=True)
    return rows
