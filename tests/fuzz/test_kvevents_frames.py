"""`kvviz events` against a publisher sending messages of many large frames, each frame under
the frame cap: ZeroMQ buffers such a message whole before handing it over, which no socket
option bounds, so the memory guard (kvviz/node/kvevents/guard.py) must end the command with
one clear error, under the 1 GB ceiling, the recording closed with what arrived before.
Every server binds 127.0.0.1 and is stopped by the test.
"""
from __future__ import annotations

import sqlite3

import pytest

from tests.fuzz.hostile_zmq import HostileNode, run_events
from tests.fuzz.test_kvevents_hostile import CEILING_MB, JUST_UNDER, SENTINEL, _argv, _check

VALID_FIRST = 5  # valid batches sent once kvviz has subscribed, before the many-frame ones
CAUSE = "messages of many frames? (kvviz takes topic, seq, payload)"


@pytest.fixture
def out_dir(tmp_path):
    (tmp_path / "keep.db").write_bytes(SENTINEL)
    return tmp_path


@pytest.mark.parametrize("frames", [64, 100])
def test_messages_of_many_frames_end_with_one_error_under_the_ceiling(out_dir, frames):
    """1 GB and 1.6 GB a message, which ZeroMQ holds whole before handing it over. (30 frames,
    480 MB a message, a subscriber that keeps up drains: 630-750 MB seen, exit 0.)"""
    node = HostileNode("many-frames", big_bytes=JUST_UNDER, frames=frames,
                       valid_first=VALID_FIRST)
    out = out_dir / "e.db"
    try:  # --duration 30: the error must come long before it
        res = run_events(_argv(node, out, 30.0), limit_s=45)
    finally:
        node.close()
    _check(out_dir, out, res)  # one line, exit 0 or 2, peak < CEILING_MB, no other file
    assert res.code == 2, (res.code, res.stderr)
    assert res.wall_s < 25, res.wall_s
    (line,) = res.stderr.splitlines()
    assert line.startswith("kvviz events: error: the process reached ") and CAUSE in line
    assert res.peak_rss_mb < CEILING_MB
    conn = sqlite3.connect(f"file:{out}?mode=ro", uri=True)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        status, message = conn.execute("SELECT status, status_message FROM run").fetchone()
        seqs = [r[0] for r in conn.execute(
            "SELECT seq FROM kv_batches WHERE status = 'ok' ORDER BY seq")]
    finally:
        conn.close()
    assert status == "error" and line == f"kvviz events: error: {message}"
    # what arrived before is recorded: the valid batches, in order, the first one included
    assert 1 <= len(seqs) <= VALID_FIRST and seqs == list(range(len(seqs))), seqs


def test_many_frames_behind_batches_that_decode_longest_stay_under_the_ceiling(out_dir):
    """Each 100-frame message behind a 16 MB batch of 2-byte hashes, whose decode holds the
    GIL (and the guard's thread) while ZeroMQ keeps receiving: the guard trips before such a
    decode would pass the limit, or its watcher process kills the command (SIGKILL) past
    995 MB. Either way one error line, under the ceiling, what was committed readable."""
    node = HostileNode("many-frames", big_bytes=JUST_UNDER, frames=100,
                       valid_first=VALID_FIRST, interleave=True)
    out = out_dir / "e.db"
    try:
        res = run_events(_argv(node, out, 30.0), limit_s=45)
    finally:
        node.close()
    assert res.code in (2, -9), (res.code, res.stderr)
    (line,) = res.stderr.splitlines()
    assert line.startswith("kvviz events: error: the process reached ") and CAUSE in line
    assert res.peak_rss_mb < CEILING_MB and res.wall_s < 25, (res.peak_rss_mb, res.wall_s)
    assert (out_dir / "keep.db").read_bytes() == SENTINEL
    conn = sqlite3.connect(f"file:{out}?mode=ro", uri=True)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        status = conn.execute("SELECT status FROM run").fetchone()[0]
    finally:
        conn.close()
    assert status == ("error" if res.code == 2 else "running")


def test_attach_gets_the_same_guard(out_dir):
    """`kvviz attach --kv-events`: the same Subscriber in a process of its own; its run ends
    `error` with the guard's message (attach's own summary line, exit 1)."""
    from tests.node.fakes import FakeNode

    web = FakeNode()
    web.thread.start()
    node = HostileNode("many-frames", big_bytes=JUST_UNDER, frames=100,
                       valid_first=VALID_FIRST)
    out = out_dir / "node.db"
    try:
        res = run_events([web.url("/metrics"), "--kv-events", node.endpoint, "--quiet",
                          "--interval", "0.5", "--duration", "30", "--out", str(out)],
                         limit_s=45, command="attach")
    finally:
        node.close()
        web.server.shutdown()
        web.server.server_close()
    assert res.code == 1 and res.wall_s < 25, (res.code, res.wall_s, res.stderr)
    assert res.peak_rss_mb < CEILING_MB, res.peak_rss_mb
    (line,) = [ln for ln in res.stderr.splitlines() if CAUSE in ln]
    assert line.startswith("kvviz attach: error: the process reached ")
    conn = sqlite3.connect(f"file:{out}?mode=ro", uri=True)
    try:
        status, message = conn.execute("SELECT status, status_message FROM run").fetchone()
    finally:
        conn.close()
    assert status == "error" and CAUSE in message
