"""`kvviz scrape --out RUN.db`: node samples land in a recording that RunReader reads."""
from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kvviz.commands.cli import main
from kvviz.store.reader import RunReader
from kvviz.store.schema import NODE_COLS
from kvviz.store.writer import RunWriter

ROOT = Path(__file__).resolve().parents[2]


def scrape(url: str, out: Path, *extra: str) -> int:
    return main(["scrape", url, "--interval", "0.05", "--quiet", "--out", str(out), *extra])


def test_samples_and_meta_are_recorded(fake_node, tmp_path):
    out = tmp_path / "node.db"
    assert scrape(fake_node.url("/counter"), out, "--count", "3", "--nvml", "never") == 0
    r = RunReader(out)
    assert r.status == "finished"
    assert r.meta["mode"] == "node" and r.meta["url"] == fake_node.url("/counter")
    assert r.meta["nvml"]["status"] == "not used"
    df = r.node_samples(raw=True)
    assert list(df["status"]) == ["ok"] * 3 and set(NODE_COLS) <= set(df.columns)
    assert list(df["preemptions_total"]) == [10, 13, 16]
    assert df["preemptions_per_s"].isna().iloc[0] and (df["preemptions_per_s"][1:] > 0).all()
    assert (df["t"].diff().dropna() > 0).all() and (df["time"] > 1e9).all()
    assert df["raw"].iloc[2]['vllm:num_preemptions_total{engine="0",model_name="m"}'] == 16
    assert r.device_memory().empty
    r.close()


def test_vllm_geometry_columns(fake_node, tmp_path):
    out = tmp_path / "node.db"
    assert scrape(fake_node.url("/metrics"), out, "--count", "1", "--nvml", "never") == 0
    row = RunReader(out).node_samples().iloc[0]
    assert row["engine"] == "vllm" and row["block_size"] > 0 and row["num_gpu_blocks"] > 0
    # each engine's null block (block 0) holds no KV: capacity counts the others
    assert row["kv_pools"] == 2
    assert row["kv_capacity_tokens"] == row["block_size"] * (row["num_gpu_blocks"] - 2)
    assert 0 <= row["kv_usage"] <= 1 and row["num_running"] >= 0


def test_unreachable_node_is_recorded_with_its_reason(closed_port_url, tmp_path):
    out = tmp_path / "down.db"
    assert scrape(closed_port_url, out, "--count", "2", "--nvml", "never") == 1
    r = RunReader(out)
    df = r.node_samples()
    assert list(df["status"]) == ["unreachable"] * 2
    assert df["message"].str.contains("Connection").all() and df["kv_usage"].isna().all()
    assert r.status == "finished"


def test_flaky_node_keeps_going_and_rates_skip_failures(fake_node, tmp_path):
    out = tmp_path / "flaky.db"
    assert scrape(fake_node.url("/flaky"), out, "--count", "4", "--nvml", "never") == 0
    df = RunReader(out).node_samples()
    assert list(df["status"]) == ["ok", "unreachable", "ok", "unreachable"]
    assert df["message"].iloc[1] == "HTTP 503 Service Unavailable"
    assert df["preemptions_per_s"].iloc[2] > 0  # from the ok sample two scrapes back


def test_local_gpu_memory_is_recorded_when_asked(fake_node, tmp_path):
    out = tmp_path / "gpu.db"
    assert scrape(fake_node.url("/metrics"), out, "--count", "2", "--nvml", "always") == 0
    r = RunReader(out)
    mem = r.device_memory()
    assert len(mem) >= 2 and set(mem["nvml_status"]) <= {"ok", "unavailable", "error"}
    assert r.meta["nvml"]["status"] in ("ok", "unavailable")
    if r.meta["nvml"]["status"] == "ok":
        assert mem["nvml_used_bytes"].notna().all()
    else:
        assert mem["nvml_reason"].str.len().gt(0).all()


def test_existing_or_misplaced_recording_exits_2(fake_node, tmp_path, capsys):
    out = tmp_path / "node.db"
    assert scrape(fake_node.url("/metrics"), out, "--count", "1") == 0
    assert scrape(fake_node.url("/metrics"), out, "--count", "1") == 2
    assert scrape(fake_node.url("/metrics"), tmp_path / "no" / "x.db", "--count", "1") == 2
    err = capsys.readouterr().err
    assert "already exists" in err and "does not exist" in err


def test_sigterm_stops_the_run_cleanly(fake_node, tmp_path):
    out = tmp_path / "term.db"
    proc = subprocess.Popen([sys.executable, "-m", "kvviz", "scrape", fake_node.url("/metrics"),
                             "--interval", "0.1", "--quiet", "--out", str(out)], cwd=ROOT,
                            stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if out.exists() and len(RunReader(out).node_samples()) >= 2:
                break
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    r = RunReader(out)
    assert r.status == "stopped" and "SIGTERM" in r.status_message
    assert len(r.node_samples()) >= 2


def test_engine_recordings_have_no_node_samples(tmp_path):
    w = RunWriter(tmp_path / "e.db", {"mode": "sim", "lanes": []})
    w.close()
    df = RunReader(tmp_path / "e.db").node_samples()
    assert df.empty and list(df.columns) == list(NODE_COLS)


def test_reader_sees_samples_while_the_writer_runs(tmp_path):
    w = RunWriter(tmp_path / "n.db", {"mode": "node", "url": "http://h/metrics", "lanes": []})
    r = RunReader(tmp_path / "n.db")
    assert r.node_samples().empty
    w.add_node_sample(0.5, {"time": 1.0, "url": "u", "status": "ok", "kv_usage": 0.25},
                      {"a": 1.0})
    w.commit()
    df = r.node_samples(raw=True)
    assert df["kv_usage"].tolist() == [0.25] and df["raw"].iloc[0] == {"a": 1.0}
    assert r.node_samples(since_t=0.5).empty
    w.close()


@pytest.mark.parametrize("bad", ["ftp://h/metrics", "http:///metrics"])
def test_bad_url_exits_2_and_writes_nothing(bad, tmp_path):
    assert scrape(bad, tmp_path / "x.db", "--count", "1") == 2
    assert not (tmp_path / "x.db").exists()


def test_the_newest_scrapes_are_read_by_count_in_time_order(tmp_path):
    out = tmp_path / "node.db"
    w = RunWriter(out, {"mode": "node", "url": "http://x"})
    for i in range(50):
        w.add_node_sample(0.5 * i, {"time": 1e9 + i, "url": "http://x", "status": "ok"})
        w.add_device_memory(0.5 * i, {"device_index": 0, "used_bytes": i})
    w.close()
    r = RunReader(out)
    assert list(r.node_samples(last=5)["t"]) == [0.5 * i for i in range(45, 50)]
    assert list(r.node_samples(last=500)["t"]) == list(r.node_samples()["t"])
    assert list(r.device_memory(last=3)["used_bytes"]) == [47, 48, 49]
    assert r.node_samples(last=0).empty
    r.close()
