"""`kvviz scrape`: prints and records samples; refuses what it cannot do with exit 2."""
from __future__ import annotations

import json

from kvviz.commands.cli import main
from kvviz.node.scrape import read_jsonl


def test_records_jsonl_and_prints_a_line_per_sample(fake_node, tmp_path, capsys):
    out = tmp_path / "node.jsonl"
    args = ["scrape", fake_node.url("/counter"), "--interval", "0.05", "--count", "3",
            "--out", str(out)]
    assert main(args) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3 and " ok vllm kv " in lines[0] and "/s)" in lines[2]
    samples = read_jsonl(out)
    assert [s.preemptions_total for s in samples] == [10, 13, 16]


def test_json_lines_on_stdout(fake_node, capsys):
    assert main(["scrape", fake_node.url("/sglang/metrics"), "--count", "1", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["engine"] == "sglang" and d["kv_capacity_tokens"] == 400000


def test_no_successful_scrape_exits_1(closed_port_url, capsys):
    assert main(["scrape", closed_port_url, "--count", "2", "--interval", "0.05"]) == 1
    captured = capsys.readouterr()
    assert "unreachable" in captured.out and "no successful scrape" in captured.err


def test_store_output_records_a_run(fake_node, tmp_path):
    out = tmp_path / "r.db"
    assert main(["scrape", fake_node.url("/metrics"), "--count", "1", "--out", str(out)]) == 0
    assert out.is_file()  # details: tests/node/test_store_sink.py


def test_bad_arguments_exit_2(tmp_path, capsys):
    assert main(["scrape", "file:///etc/passwd", "--count", "1"]) == 2
    assert main(["scrape", "localhost:1", "--out", str(tmp_path / "x.csv")]) == 2
    assert main(["scrape", "localhost:1", "--interval", "0"]) == 2
    assert main(["scrape", "localhost:1", "--count", "0"]) == 2
    err = capsys.readouterr().err
    assert "only http" in err and ".jsonl or .db" in err and "--interval: must be in" in err


def test_the_line_says_off_when_the_node_has_prefix_caching_off():
    import dataclasses

    from kvviz.commands.scrape import format_line
    from kvviz.node.promtext import NodeSample

    fields = {f.name: None for f in dataclasses.fields(NodeSample)}
    s = NodeSample(**{**fields, "time": 0.0, "url": "http://x", "status": "ok", "message": "",
                      "engine": "vllm", "prefix_hit_rate": -1.0, "prefix_caching_off": True})
    assert format_line(s).endswith("prefix hit off")
    on = dataclasses.replace(s, prefix_caching_off=False, prefix_hit_rate=0.5)
    assert format_line(on).endswith("prefix hit 50.0%")


DASHBOARD = """
import sys, time
from pathlib import Path
from kvviz.runs.jobs import ScrapeJob
p = ScrapeJob(Path(sys.argv[1]))
out = p.start(sys.argv[2], interval_s=0.2, timeout_s=1.0)
print(p.status().pid, out, flush=True)
time.sleep(300)
"""


def test_a_scrape_job_stops_when_its_dashboard_is_killed(tmp_path, fake_node):
    import os
    import subprocess
    import sys
    import time
    from pathlib import Path

    from kvviz.store.reader import RunReader

    root = Path(__file__).resolve().parents[2]
    url = fake_node.url("/metrics")
    dash = subprocess.Popen([sys.executable, "-c", DASHBOARD, str(tmp_path), url],
                            stdout=subprocess.PIPE, cwd=root,
                            env={**os.environ, "PYTHONPATH": str(root)})
    pid_s, out_s = dash.stdout.readline().decode().split()
    child, out = int(pid_s), Path(out_s)
    try:
        end = time.monotonic() + 30
        while not out.exists() and time.monotonic() < end:
            time.sleep(0.1)
        dash.kill()  # SIGKILL: no atexit; only the job's own watch on its parent is left
        dash.wait(10)
        end = time.monotonic() + 20
        while Path(f"/proc/{child}").exists() and time.monotonic() < end:
            state = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[0]
            if state in "ZX":
                break
            time.sleep(0.1)
        else:
            assert not Path(f"/proc/{child}").exists(), "the scrape outlived its dashboard"
        r = RunReader(out)
        try:
            assert r.status == "stopped"
        finally:
            r.close()
    finally:
        try:
            os.kill(child, 9)
        except OSError:
            pass


def test_the_line_names_the_interval_and_the_since_start_hit_rates():
    import dataclasses

    from kvviz.commands.scrape import format_line
    from kvviz.node.promtext import NodeSample

    fields = {f.name: None for f in dataclasses.fields(NodeSample)}
    s = NodeSample(**{**fields, "time": 0.0, "url": "http://x", "status": "ok", "message": "",
                      "engine": "vllm", "prefix_caching_off": False, "prefix_hit_rate": 0.6,
                      "prefix_hit_rate_interval": 0.0, "interval_s": 2.0})
    # after a prefix-cache reset the counters go on: the two rates differ, both are shown
    assert format_line(s).endswith("prefix hit 0.0% last 2s, 60.0% since start")
