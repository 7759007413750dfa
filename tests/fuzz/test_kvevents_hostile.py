"""`kvviz events` against a hostile node (tests/fuzz/hostile_zmq.py): whatever the PUB and the
ROUTER replay socket send (depth, size, floods, silence, garbage, gaps), the command gives a
result or one clear error, within a time and memory bound, records what arrived, and touches
no file it did not create. Every server binds 127.0.0.1 and is stopped by the test.
"""
from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path

import pytest

from tests.fuzz.hostile import check_property, run_cli
from tests.fuzz.hostile_zmq import HostileNode, run_events

DURATION_S = 2.0
# The promise is 1 s (benchmarks/floods.py measures it); these bounds only tell an answer
# from a hang (the issue saw 40-86 s) on a shared 2-core machine where start-up alone can
# take seconds. Durations count from the child's start, SIGTERM from when it was sent.
SLACK_S = 8.0
CEILING_MB = 1024  # docs/RELIABILITY.md, "KV-event streams"
SENTINEL = b"a file the command must not touch"

CASES = [  # (publisher, replay router, what the recording must hold)
    ("silent", "none", "nothing"),
    ("silent", "silent", "nothing"),
    ("garbage", "none", "undecodable"),
    ("deep-array", "none", "undecodable"),
    ("deep-map", "none", "undecodable"),
    ("gaps", "silent", "batches"),
    ("gaps", "flood", "batches"),
    ("gaps", "big", "batches"),
    ("gaps", "garbage", "batches"),
    ("flood", "none", "batches"),
    ("big-topic", "none", "nothing"),
    ("big-batch", "none", "nothing"),
    ("worst-batch", "none", "batches"),
    ("generic-bomb", "none", "undecodable"),
    ("valid", "valid", "batches"),
]
# batches just under the default --max-message-mb: what it lets through, at its worst
JUST_UNDER = (16 << 20) - (1 << 10)
OPTS = {"worst-batch": {"big_bytes": JUST_UNDER}, "generic-bomb": {"big_bytes": JUST_UNDER}}


def _argv(node: HostileNode, out: Path, duration: float | None) -> list[str]:
    argv = [node.endpoint, "--quiet", "--out", str(out)]
    if duration is not None:
        argv += ["--duration", str(duration)]
    return argv + (["--replay", node.replay] if node.replay else [])


def _check(out_dir: Path, out: Path, res) -> None:
    """The property: exit 0 (warnings only) or 2 with one error line; memory bounded; no file
    touched but the recording (and SQLite's -wal/-shm beside it)."""
    lines = res.stderr.splitlines()
    assert "Traceback" not in res.stderr, res.stderr
    if res.code == 2:
        assert len(lines) == 1 and lines[0].startswith("kvviz events: error: "), res.stderr
    else:
        assert res.code == 0, (res.code, res.stderr)
        assert all(ln.startswith("kvviz events: warning: ") for ln in lines), res.stderr
    assert res.peak_rss_mb < CEILING_MB, f"peak RSS {res.peak_rss_mb:.0f} MB"
    assert (out_dir / "keep.db").read_bytes() == SENTINEL
    ours = {out.name, out.name + "-wal", out.name + "-shm", "keep.db"}
    assert {p.name for p in out_dir.iterdir()} <= ours


def _rows(out: Path) -> tuple[int, int, list[bytes]]:
    conn = sqlite3.connect(f"file:{out}?mode=ro", uri=True)
    try:
        ok, bad = conn.execute("SELECT COALESCE(SUM(status = 'ok'), 0), "
                               "COALESCE(SUM(status = 'undecodable'), 0) FROM kv_batches"
                               ).fetchone()
        raw = [r[0] for r in conn.execute("SELECT payload FROM kv_batches WHERE status = "
                                          "'undecodable' LIMIT 3")]
        return ok, bad, raw
    finally:
        conn.close()


@pytest.fixture
def out_dir(tmp_path: Path) -> Path:
    (tmp_path / "keep.db").write_bytes(SENTINEL)
    return tmp_path


@pytest.mark.parametrize("pub,router,holds", CASES, ids=[f"{p}/{r}" for p, r, _ in CASES])
def test_duration_is_kept_and_what_arrived_is_recorded(out_dir, pub, router, holds):
    node = HostileNode(pub, router, **OPTS.get(pub, {}))
    out = out_dir / "e.db"
    try:
        res = run_events(_argv(node, out, DURATION_S), limit_s=60)
    finally:
        node.close()
    _check(out_dir, out, res)
    assert res.code == 0 and res.wall_s < DURATION_S + SLACK_S, (res.wall_s, res.stderr)
    ok, bad, raw = _rows(out)
    if holds == "batches":
        assert ok > 0
    elif holds == "undecodable":
        assert ok == 0 and bad > 0
        if pub.startswith("deep"):  # counted undecodable and kept raw, byte for byte
            assert raw and all(len(r) > 1000 and r.endswith(b"\x91" * 100 + b"\xc0")
                               for r in raw)
    else:
        assert ok == 0


SIGTERM_CASES = [("gaps", "silent"), ("gaps", "flood"), ("gaps", "big"), ("flood", "none"),
                 ("big-batch", "none"), ("worst-batch", "none"), ("generic-bomb", "none")]


@pytest.mark.parametrize("pub,router", SIGTERM_CASES, ids=[f"{p}/{r}" for p, r in SIGTERM_CASES])
def test_sigterm_is_honoured_whatever_the_sockets_do(out_dir, pub, router):
    node = HostileNode(pub, router, **OPTS.get(pub, {}))
    out = out_dir / "e.db"
    try:
        res = run_events(_argv(node, out, None), signal_after_s=1.0, limit_s=60, ready=out)
    finally:
        node.close()
    _check(out_dir, out, res)
    assert res.code == 0 and res.wall_s < 1.0 + SLACK_S, (res.wall_s, res.stderr)
    conn = sqlite3.connect(f"file:{out}?mode=ro", uri=True)
    status, message = conn.execute("SELECT status, status_message FROM run").fetchone()
    conn.close()
    assert (status, message) == ("stopped", "stopped by SIGTERM")


def _vm_rss_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(ln.split()[1]) for ln in f if ln.startswith("VmRSS:")) / 1024


def test_the_peak_is_the_childs_own_however_big_this_process_is(out_dir):
    """The CI flake (worst-batch/none read 1,053 MB once, in a full-suite run; ~450 MB alone):
    wait4's ru_maxrss of a child started straight from a pytest worker counts the worker's
    memory it was forked with, not only its own. This process holds CEILING_MB here, as a
    worker late in a suite may: the measured peak must still be the child's."""
    ballast = b"\x01" * (CEILING_MB << 20)  # written, so resident
    assert _vm_rss_mb() > CEILING_MB
    node = HostileNode("worst-batch", "none", **OPTS["worst-batch"])
    out = out_dir / "e.db"
    try:
        res = run_events(_argv(node, out, None), signal_after_s=1.0, limit_s=60, ready=out)
    finally:
        node.close()
    del ballast
    _check(out_dir, out, res)
    assert res.code == 0 and _rows(out)[0] > 0, res.stderr


def test_a_starved_subscriber_stays_under_the_ceiling(out_dir):
    """The subscriber stopped (SIGSTOP) 0.3 s in every 0.35 s while batches at the frame cap
    that decode into the most objects keep coming: what piles up meanwhile is bounded by the
    receive queues, not by how far the publisher gets ahead; SIGTERM still ends it."""
    node = HostileNode("worst-batch", "none", **OPTS["worst-batch"])
    out = out_dir / "e.db"
    try:
        res = run_events(_argv(node, out, None), signal_after_s=3.0, limit_s=60, ready=out,
                         pause=(0.3, 0.05))
    finally:
        node.close()
    _check(out_dir, out, res)
    assert res.code == 0 and res.wall_s < 1.0 + SLACK_S, (res.wall_s, res.stderr)
    assert _rows(out)[0] > 0


BAD_ENDPOINTS = {
    "tcp://127.0.0.1:5999/x": "nothing may follow the port",
    "tcp://u:p@127.0.0.1:5999": "no user name or password",
    "ipc:///tmp/" + "a" * 200: "a Unix socket path holds at most 107",
    "tcp://127.0.0.1:5999\n": "no spaces or control characters",
    "tcp://127.0.0.1:0": "port must be in [1, 65535]",
    "tcp://127.0.0.1:5999?x=1": "nothing may follow the port",
    "tcp://127.0.0.1:70000": "expected tcp://HOST:PORT with a host and a port",
}


@pytest.mark.parametrize("endpoint", list(BAD_ENDPOINTS))
def test_endpoints_zeromq_rejects_are_refused_up_front(out_dir, endpoint):
    """In-process, under tests/fuzz/hostile.py's SIGALRM deadline (these hung forever)."""
    out = out_dir / "e.db"
    t0 = time.monotonic()
    for argv in ([endpoint], ["tcp://127.0.0.1:5999", "--replay", endpoint]):
        argv = ["events", *argv, "--duration", "30", "--out", str(out)]
        res = run_cli(argv)
        check_property("events", argv, res)
        assert res.code == 2 and BAD_ENDPOINTS[endpoint] in res.err
    assert time.monotonic() - t0 < 5 and not out.exists()


def test_dp_ranks_past_the_open_file_limit_is_one_error_before_any_socket(out_dir):
    out = out_dir / "e.db"
    res = run_events(["tcp://127.0.0.1:5999", "--dp-ranks", "2000", "--duration", "30",
                      "--out", str(out)], nofile=1024, limit_s=30)
    assert res.code == 2 and res.wall_s < 10
    (line,) = res.stderr.splitlines()
    assert line.startswith("kvviz events: error: 2000 streams") and "ulimit -n" in line
    assert not out.exists()


def test_the_dashboard_job_shows_the_child_error_not_running(tmp_path):
    """A job whose child fails after the page's own checks (here the open-file limit) ends
    as "error" with that line, within seconds."""
    import subprocess
    import sys

    script = """
import resource, sys, time
from pathlib import Path
resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
from kvviz.runs import jobs
job = jobs.EventsJob(Path(sys.argv[1]))
job.start(["tcp://127.0.0.1:5999"], dp_ranks=100)
end = time.monotonic() + 20
while job.status().state == "running" and time.monotonic() < end:
    time.sleep(0.1)
s = job.status()
print(s.state)
print(s.last_message)
"""
    root = Path(__file__).resolve().parents[2]
    r = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True,
                       text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(root)})
    state, message = r.stdout.splitlines()[:2]
    assert state == "error", r.stdout + r.stderr
    assert message.startswith("kvviz events: error: 100 streams") and "ulimit -n" in message
