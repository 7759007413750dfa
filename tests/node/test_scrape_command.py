"""`kvviz scrape`: prints and records samples; refuses what it cannot do with exit 2."""
from __future__ import annotations

import json

from kvviz.cli import main
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
