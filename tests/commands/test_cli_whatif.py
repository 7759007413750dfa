"""kvviz whatif: its rows are kvviz simulate's runs at the same settings; bad input is exit 2."""
from __future__ import annotations

import json

import pytest

from kvviz.commands.cli import main
from kvviz.core.config import WorkloadConfig
from kvviz.core.workload import dump_trace, generate

SAME = ("steps", "finished", "rejected", "preemptions", "admit_failures", "prefix_hit_rate",
        "tail_waste_share", "used_share", "free_share", "tokens_generated")


@pytest.fixture(scope="module")
def trace(tmp_path_factory) -> str:
    w = generate(WorkloadConfig(num_requests=120, rate=30.0, prefix_share=0.5, seed=5))
    path = tmp_path_factory.mktemp("whatif") / "t.jsonl"
    dump_trace(w, path)
    return str(path)


def _json(capsys, argv: list[str]) -> tuple[dict, list[dict]]:
    assert main(argv) == 0
    head, *rows = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    return head, rows


def test_each_row_is_the_simulate_run_at_its_settings(capsys, trace):
    head, rows = _json(capsys, ["whatif", trace, "--json", "--workers", "1",
                                "--node-num-blocks", "401", "--block-size", "32",
                                "--prefix-caching", "on,off"])
    assert head["self_check"]["equal"] is None and head["configurations"] == len(rows) == 3
    for r in rows:
        s = r["settings"]
        lane = f"paged:{s['block_size']}" + (":prefix" if s["enable_prefix_caching"] else "")
        cap = (s["num_gpu_blocks"] - 1) * s["block_size"]
        assert main(["simulate", "--json", "--trace", trace, "--lane", lane,
                     "--capacity-tokens", str(cap)]) == 0
        (sim,) = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
        assert {k: r[k] for k in SAME} == {k: sim[k] for k in SAME}
    assert rows[0]["preemptions"] > 0 and rows[0]["prefix_hit_rate"] > 0
    assert rows[1]["settings"]["num_gpu_blocks"] == 200  # block 32 at the node's memory


def test_the_table_names_the_baseline_and_says_there_is_no_node_run(capsys, trace):
    assert main(["whatif", trace, "--workers", "1", "--max-num-seqs", "8"]) == 0
    out = capsys.readouterr().out
    assert "node's own (baseline)" in out and "seqs 8" in out
    assert "there is no node run to compare" in out


@pytest.mark.parametrize("argv, words", [
    (["--block-size", "16,x"], "kvviz whatif: error: argument --block-size: 'x': not an int"),
    (["--block-size", "16,99999999"], "'99999999': must be in [1, 65536]"),
    (["--kv-memory", "1.2y"], "--kv-memory: '1.2y': neither a multiple"),
    (["--num-blocks", "1"], "--num-blocks: '1': must be in [2,"),
    (["--kv-memory", "0.0001x"], "--kv-memory 0.0001x: block size 16: must be in [2,"),
    (["--block-size", ",".join(map(str, range(1, 40))), "--max-num-seqs",
      ",".join(map(str, range(1, 9)))], "312 configurations"),
    (["--node-num-blocks", "1"], "--node-num-blocks"),
    (["--node-chunked-prefill", "off", "--node-max-num-batched-tokens", "16"],
     "max_num_batched_tokens: 16 is below max_seq_len"),
    (["--set", "fastest"], "--set: 'fastest'"),
])
def test_bad_flags_are_one_error_line(capsys, trace, argv, words):
    assert main(["whatif", trace, *argv]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and words in err


def test_a_recording_without_a_request_log_is_refused_plainly(capsys, tmp_path):
    from tests.fuzz.hostile import make_recording

    rec = make_recording(tmp_path / "run.db")
    assert main(["whatif", str(rec)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kvviz whatif: error: ") and "kvviz attach --blocks" in err
    assert main(["whatif", str(rec), "--node-block-size", "32"]) == 2
    assert "--node-* flags are for a trace" in capsys.readouterr().err


def test_an_attach_recording_is_replayed_at_its_own_settings(capsys, tmp_path):
    from tests.twin import noderun

    rec = noderun.write(tmp_path / "node.db", noderun.workload(16, spread=20))
    head, rows = _json(capsys, ["whatif", str(rec), "--json", "--workers", "1",
                                "--block-size", "32"])
    assert head["self_check"]["equal"] is True and head["requests"] == 16
    assert head["node_settings"] == noderun.SETTINGS.as_dict() and len(rows) == 2
    assert head["self_check"]["steps_compared"] > 0 and head["self_check"]["not_replayed"] == []
    assert main(["whatif", str(rec), "--workers", "1"]) == 0
    out = capsys.readouterr().out
    assert "self-check: replay equals the node" in out and "node's own (baseline)" in out
