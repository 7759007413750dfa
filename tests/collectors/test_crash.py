"""A killed collector leaves a valid prefix; a stopped one flushes; readers see prefixes."""
from __future__ import annotations

import signal
import sqlite3
import time
from pathlib import Path

from kvviz.store.reader import RunReader
from tests.collectors.conftest import FAST_SIM, spawn, wait_for_samples

BUSY = [*FAST_SIM, "--rate", "inf", "--requests", "100000", "--capacity-tokens", "65536"]


def _children(pid: int) -> list[int]:
    try:
        return [int(x) for x in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:  # no /proc children list on this kernel
        return []


def _gone(pid: int) -> bool:
    try:  # exited: no entry, or a zombie waiting for init
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in "ZX"
    except OSError:
        return True


def test_sigkill_keeps_every_committed_sample(tmp_path: Path) -> None:
    out = tmp_path / "killed.db"
    proc = spawn(out, *BUSY)
    seen = wait_for_samples(out, 40, proc)
    writers = _children(proc.pid)  # the store writer process
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    end = time.monotonic() + 10
    while not all(_gone(p) for p in writers) and time.monotonic() < end:
        time.sleep(0.02)
    assert all(_gone(p) for p in writers), "the store writer outlived the collector"
    r = RunReader(out)
    while r.status == "running" and time.monotonic() < end:
        time.sleep(0.02)
        r.refresh()
    # the writer process saw its pipe end, committed what it had and closed the run
    assert (r.status, r.status_message) == ("error", "collector process died")
    with sqlite3.connect(out) as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert len(r.samples()) >= seen
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
        # at least 3 s of reads, and on until the writer has made 10 batches (a loaded
        # machine samples slower; 60 s at most)
        soon, end = time.monotonic() + 3, time.monotonic() + 60
        while time.monotonic() < soon or (last_n <= 10 and time.monotonic() < end):
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
