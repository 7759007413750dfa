"""A killed collector leaves a valid prefix; a stopped one flushes; readers see prefixes."""
from __future__ import annotations

import signal
import sqlite3
import time
from pathlib import Path

from kvviz.store import RunReader

from .conftest import FAST_SIM, spawn, wait_for_samples

BUSY = [*FAST_SIM, "--rate", "inf", "--requests", "100000", "--capacity-tokens", "65536"]


def test_sigkill_keeps_every_committed_sample(tmp_path: Path) -> None:
    out = tmp_path / "killed.db"
    proc = spawn(out, *BUSY)
    seen = wait_for_samples(out, 40, proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    with sqlite3.connect(out) as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    r = RunReader(out)
    assert len(r.samples()) >= seen
    assert r.status == "running"  # never closed: the heartbeat tells how long ago it died
    for lane in r.lanes():
        assert r.latest_blockmap(lane) is not None
    ids = r.samples().sample_id
    assert list(ids) == list(range(1, len(ids) + 1))


def test_sigterm_and_sigint_stop_cleanly(tmp_path: Path) -> None:
    for sig in (signal.SIGTERM, signal.SIGINT):
        out = tmp_path / f"{sig.name}.db"
        proc = spawn(out, *BUSY)
        wait_for_samples(out, 10, proc)
        proc.send_signal(sig)
        assert proc.wait(20) == 0, proc.stderr.read().decode()
        r = RunReader(out)
        assert (r.status, r.status_message) == ("stopped", f"stopped by {sig.name}")
        assert not Path(f"{out}-wal").exists()  # closed back to one file


def test_concurrent_reader_sees_consistent_prefixes(tmp_path: Path) -> None:
    out = tmp_path / "live.db"
    proc = spawn(out, *BUSY)
    try:
        wait_for_samples(out, 2, proc)
        r = RunReader(out)
        last_n, last_ev, checks = 0, 0, 0
        end = time.monotonic() + 3
        while time.monotonic() < end:
            s = r.samples()
            n = len(s)
            assert n >= last_n and list(s.sample_id) == list(range(1, n + 1))
            per_lane = s.groupby("lane").size()
            assert per_lane.max() - per_lane.min() == 0  # whole batches only
            ev = len(r.events())
            assert ev >= last_ev
            for lane in r.lanes():
                got = r.latest_blockmap(lane)
                assert got is not None and got[0].num_blocks > 0
            last_n, last_ev, checks = n, ev, checks + 1
        assert checks > 5 and last_n > 10
        r.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(20)
