"""The verifier on a recording still being written (issue 25 item 15): one consistent snapshot,
said to be live, no false mismatches. Before, each query saw a later commit than the last
(events read before samples that had moved on): 61-136 mismatches on this run."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from kvviz.verify import verify
from kvviz.verify.__main__ import main as verify_main

ROOT = Path(__file__).resolve().parents[2]


def test_a_live_recording_verifies_clean_and_says_it_is_live(tmp_path, capsys):
    out = tmp_path / "live.db"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    writer = subprocess.Popen(
        [sys.executable, "-m", "kvviz", "collect", "--mode", "sim", "--quiet", "--steps-per-s",
         "400", "--hz", "20", "--lane", "contiguous:first-fit:max", "--lane",
         "paged:16:prefix", "--prefix-sharing", "0.5", "--rate", "50", "--requests", "5000",
         "--duration", "120", "--out", str(out)],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not out.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(2.0)
        seen = []
        for _ in range(3):
            assert writer.poll() is None, writer.stderr.read().decode()[-2000:]
            rep = verify(out)
            assert rep.status == "running" and rep.live
            assert rep.mismatch_count == 0, rep.mismatches[:5]
            assert "live recording" in rep.note
            seen.append(rep.contents["samples"])
            time.sleep(0.5)
        assert seen[-1] > seen[0] > 0  # the writer moved on between the checks
        assert verify_main([str(out)]) == 0
        assert "a live recording (status running" in capsys.readouterr().out
    finally:
        writer.send_signal(signal.SIGTERM)
        writer.wait(timeout=60)
    rep = verify(out)  # closed by the signal: no longer live, still clean
    assert not rep.live and rep.mismatch_count == 0
