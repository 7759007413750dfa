"""The memory guard (kvviz/node/kvevents/guard.py) with a scripted RSS: it trips past its
limit and wakes the subscriber, whose poll closes the sockets and raises MemoryLimit; its
last resort ends the process with one error line; where RSS cannot be read it is off."""
from __future__ import annotations

import os
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kvviz.node.kvevents.guard import BASE_MB, MB, MemoryGuard, MemoryLimit, rss_bytes
from kvviz.node.kvevents.subscriber import Subscriber, SubscriberConfig

ROOT = Path(__file__).resolve().parents[2]


class Script:
    """An RSS reading that the test sets."""

    def __init__(self, mb: int) -> None:
        self.mb = mb

    def __call__(self) -> int:
        return self.mb * MB


def _wait(cond, limit_s: float = 10.0) -> None:
    end = time.monotonic() + limit_s
    while not cond() and time.monotonic() < end:
        time.sleep(0.01)


def test_rss_is_read_on_linux():
    assert rss_bytes() is not None and rss_bytes() > 1 * MB


def test_it_trips_past_its_limit_and_wakes_the_poll():
    rss = Script(BASE_MB)
    hard: list[str] = []
    g = MemoryGuard(trip_mb=100, hard_mb=200, on_hard=hard.append, read=rss)
    try:
        time.sleep(0.1)
        assert g.tripped is None and not select.select([g.wake_fd], [], [], 0)[0]
        rss.mb = 150
        _wait(lambda: g.tripped is not None)
        assert "150 MB" in g.tripped and "limit is 100 MB" in g.tripped
        assert "many frames" in g.tripped and select.select([g.wake_fd], [], [], 0)[0]
        g.released()  # the sockets closed: past the hard limit now is not the last resort
        rss.mb = 300
        time.sleep(0.2)
        assert hard == []
    finally:
        g.close()


def test_the_last_resort_runs_only_while_the_sockets_are_open():
    rss = Script(BASE_MB)
    hard: list[str] = []
    g = MemoryGuard(trip_mb=100, hard_mb=200, on_hard=hard.append, read=rss)
    try:
        rss.mb = 250
        _wait(lambda: bool(hard))
        assert len(hard) == 1 and "past 200 MB, kvviz ended at once" in hard[0]
    finally:
        g.close()


def test_a_process_that_started_big_has_the_excess_on_top():
    g = MemoryGuard(trip_mb=960, hard_mb=1000, read=Script(BASE_MB + 500))
    try:
        assert (g.trip_mb, g.hard_mb) == (1460, 1500)
    finally:
        g.close()


def test_off_where_rss_cannot_be_read():
    g = MemoryGuard(read=lambda: None)
    sub = Subscriber(SubscriberConfig(("tcp://127.0.0.1:20000",)), guard=g)
    try:
        assert not g.enabled and sub.guard is None and sub.poll(10) == 0
    finally:
        sub.close()
        g.close()


def test_a_tripped_guard_closes_the_sockets_and_poll_raises():
    rss = Script(BASE_MB)
    g = MemoryGuard(trip_mb=100, hard_mb=200, on_hard=pytest.fail, read=rss)
    sub = Subscriber(SubscriberConfig(("tcp://127.0.0.1:20000",)), guard=g)
    try:
        assert sub.poll(10) == 0
        rss.mb = 150
        t0 = time.monotonic()
        with pytest.raises(MemoryLimit, match="many frames"):
            for _ in range(200):  # the wake byte ends a poll's wait at once
                sub.poll(100)
        assert time.monotonic() - t0 < 10
        assert sub.ctx.closed and all(st.sock.closed for st in sub.streams)
        rss.mb = 300  # released: the last resort (pytest.fail) is off
        time.sleep(0.2)
    finally:
        sub.close()  # a second close is a no-op
        g.close()


def test_the_last_resort_prints_one_line_and_exits_2():
    """exit_now in a child whose main thread sleeps while its scripted RSS climbs."""
    code = (
        "import time\n"
        "from kvviz.node.kvevents import guard\n"
        "rss = iter([guard.BASE_MB * guard.MB])  # at start; then 300 MB\n"
        "g = guard.MemoryGuard(trip_mb=100, hard_mb=200,\n"
        "                      read=lambda: next(rss, 300 * guard.MB),\n"
        "                      on_hard=guard.exit_now('kvviz events'))\n"
        "time.sleep(30)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 2, (r.returncode, r.stderr)
    (line,) = r.stderr.splitlines()
    assert line.startswith("kvviz events: error: the process reached 300 MB") and \
        "kvviz ended at once" in line


def test_a_decode_that_would_pass_the_limit_trips_it_first():
    rss = Script(BASE_MB + 100)
    g = MemoryGuard(trip_mb=1000, hard_mb=2000, read=Script(BASE_MB))
    try:
        g.read = rss
        assert not g.would_pass(800 * MB) and g.tripped is None
        assert g.would_pass(900 * MB) and "a 900 MB decode would have passed it" in g.tripped
    finally:
        g.close()


def test_the_watcher_process_kills_a_command_whose_thread_cannot_run():
    """The main thread holds the GIL (one long C call, as a decode does), so the guard's
    thread cannot run; the watcher process (no GIL of ours) writes the line and kills."""
    code = (
        "from kvviz.node.kvevents import guard\n"
        "g = guard.MemoryGuard(prog='kvviz events', trip_mb=10**6, hard_mb=10**6, "
        "watch_mb=1)\n"
        "sum(range(10**11))\n")
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == -9 and time.monotonic() - t0 < 30, (r.returncode, r.stderr)
    (line,) = r.stderr.splitlines()
    assert line.startswith("kvviz events: error: the process reached ") and \
        "past 1 MB, kvviz was killed" in line


def test_the_watcher_ends_with_the_guard():
    g = MemoryGuard(prog="kvviz events", trip_mb=10**6, hard_mb=10**6, watch_mb=10**6)
    w = g.watcher
    assert w is not None and w.poll() is None
    g.close()
    assert w.poll() is not None and g.watcher is None


def test_kvviz_events_starts_under_the_interpreter_base_the_limits_count_on(tmp_path):
    # The guard's limits assume a bare interpreter with kvviz's receiving libraries (BASE_MB);
    # a command that started larger raises them by the excess, which once put the watcher's
    # kill at 1,024 MB: `kvviz events` imported the compiled rule (numba, ~50 MB) through
    # kvviz.engine's package import. It must not; and its RSS a moment after start is under
    # BASE_MB.
    import subprocess
    import sys
    import time
    probe = ("import sys, kvviz.commands.events, kvviz.runs.lifecycle, "
             "kvviz.node.kvevents.subscriber, kvviz.node.kvevents.ingest; "
             "print(sorted(m for m in ('numba', 'llvmlite', 'torch', 'pandas') "
             "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stdout + out.stderr
    out = tmp_path / "e.db"
    p = subprocess.Popen([sys.executable, "-m", "kvviz", "events", "tcp://127.0.0.1:9",
                          "--quiet", "--out", str(out), "--duration", "30"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:  # its recording exists once it is set up; a second later it is receiving
        end = time.monotonic() + 30
        while not out.exists() and p.poll() is None and time.monotonic() < end:
            time.sleep(0.05)
        time.sleep(1.0)
        assert p.poll() is None, "kvviz events ended early"
        with open(f"/proc/{p.pid}/statm") as f:
            rss_mb = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / MB
    finally:
        p.terminate()  # SIGTERM: it closes the recording and exits
        p.wait(30)
    assert rss_mb < BASE_MB, rss_mb
