"""A configuration's run as a recording: readable by Replay's reader and clean by the verifier."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from kvviz.store.reader import RunReader
from kvviz.twin.record import record_config
from kvviz.twin.runner import run_config
from kvviz.twin.settings import NodeSettings
from tests.twin.streams import stream

ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]


def test_the_recording_is_the_table_run_and_verifies(tmp_path):
    s, cfg = stream(60, 40.0, prefix=0.5), NodeSettings(16, 129)
    run = run_config(s, cfg)
    path = record_config(s, cfg, tmp_path / "alt.db", source="t.jsonl",
                         busy_steps=run.summary["steps"], max_samples=40)
    r = RunReader(path)
    try:
        assert r.lanes() == ["paged:16:prefix"]
        samples = r.samples()
        assert 10 <= len(samples) <= 45
        last = samples.iloc[-1]
        assert int(last["preemptions"]) == run.summary["preemptions"] > 0
        assert int(last["step"]) == run.summary["steps"]
        assert r.count_events("preempted") == run.summary["preemptions"]
        assert r.latest_blockmap("paged:16:prefix") is not None
    finally:
        r.close()
    out = subprocess.run([sys.executable, "-m", "kvviz.verify", str(path), "--json"],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert json.loads(out.stdout)


def test_an_existing_file_is_never_replaced(tmp_path):
    from kvviz.core.errors import StoreError

    p = tmp_path / "x.db"
    p.write_text("mine")
    with pytest.raises(StoreError, match="already exists"):
        record_config(stream(5, 40.0), NodeSettings(16, 129), p)
    assert p.read_text() == "mine"
