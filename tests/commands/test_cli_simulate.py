"""kvviz simulate: the flags scripts and the dashboard rely on, and exit 2 on bad input."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from kvviz.commands.cli import main

FIELDS = {"lane", "allocator", "block_size", "steps", "finished", "preemptions",
          "admit_failures", "used_share", "reserved_share", "internal_share", "free_share",
          "tail_waste_share", "external_frag_index_mean", "tokens_generated", "wall_seconds",
          "pressure_steps", "pressure_step_shares", "simulated_seconds"}
SHARES = ("used", "reserved", "internal", "free")


def run_json(capsys, *args: str) -> list[dict]:
    assert main(["simulate", "--json", *args]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_json_has_every_documented_field_and_shares_sum_to_one(capsys):
    rows = run_json(capsys, "--requests", "300", "--capacity-tokens", "40000", "--rate", "inf",
                    "--lane", "contiguous:first-fit:max", "--lane", "paged:16")
    assert [r["lane"] for r in rows] == ["contiguous:first-fit:max", "paged:16"]
    for r in rows:
        assert FIELDS <= r.keys()
        assert set(r["admit_failures"]) == {"capacity", "fragmentation", "policy"}
        assert r["pressure_steps"] > 0  # 40k slots for 300 requests at once: memory is short
        total = sum(r[f"{k}_share"] for k in SHARES)
        assert total == pytest.approx(1.0, abs=1e-9)
        p = r["pressure_step_shares"]
        assert sum(p[k] for k in SHARES) == pytest.approx(1.0, abs=1e-9)
        assert r["finished"] == 300


def test_a_lane_never_under_memory_pressure_has_null_pressure_shares(capsys):
    (r,) = run_json(capsys, "--requests", "100", "--capacity-tokens", "1000000", "--rate", "inf",
                    "--lane", "paged:16", "--max-num-seqs", "4")  # waits for the batch limit only
    assert r["pressure_steps"] == 0 and r["admit_failures"]["policy"] > 0
    assert r["pressure_step_shares"] is None  # named, and null: no pressure step
    assert None not in [r[f"{k}_share"] for k in SHARES]  # the top level is over all steps
    assert sum(r[f"{k}_share"] for k in SHARES) == pytest.approx(1.0)


def test_the_table_shows_both_averages_and_says_what_they_average(capsys):
    args = ["simulate", "--requests", "100", "--capacity-tokens", "12000", "--rate", "inf",
            "--lane", "paged:16"]
    assert main([*args, "--json"]) == 0
    (r,) = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert main(args) == 0
    out = capsys.readouterr().out
    n = r["pressure_steps"]
    assert f"{n} ({n / r['steps']:.1%})" in out and f"{r['used_share']:.1%}" in out
    assert f"{r['pressure_step_shares']['used']:.1%}" in out
    assert "refused for memory (CAPACITY or FRAGMENTATION) or a sequence was preempted" in out
    assert main(["simulate", "--requests", "50", "--capacity-tokens", "1000000"]) == 0
    assert "never under memory pressure" in capsys.readouterr().out


def test_lanes_share_one_request_stream(capsys):
    rows = run_json(capsys, "--requests", "200", "--capacity-tokens", "30000",
                    "--lane", "contiguous:best-fit:exact", "--lane", "paged:8")
    assert rows[0]["tokens_generated"] == rows[1]["tokens_generated"]


def test_contiguous_max_reservation_wastes_more_than_paged(capsys):
    rows = run_json(capsys, "--requests", "400", "--capacity-tokens", "60000", "--rate", "inf",
                    "--lane", "contiguous:first-fit:max", "--lane", "paged:16")
    contiguous, paged = rows
    assert contiguous["internal_share"] > 0.3  # reserving 2048 for ~500-token sequences
    assert paged["internal_share"] < 0.01
    assert paged["used_share"] > contiguous["used_share"]


def test_single_lane_flags_build_the_named_allocator(capsys):
    (row,) = run_json(capsys, "--allocator", "contiguous", "--placement", "buddy",
                      "--reserve", "pow2", "--requests", "100", "--capacity-tokens", "20000")
    assert row["lane"] == "contiguous:buddy:pow2"
    (row,) = run_json(capsys, "--block-size", "32", "--requests", "100",
                      "--capacity-tokens", "20000", "--rate", "50", "--step-ms", "10")
    assert row["lane"] == "paged:32" and row["block_size"] == 32


@pytest.mark.parametrize("args, needle", [
    (["--block-size", "0"], "--block-size"),
    (["--workload", "nope"], "preset"),
    (["--lane", "paged:x"], "lane"),
    (["--lane", "contiguous:first-fit:sometimes"], "reserve"),
    (["--capacity-tokens", "5"], "capacity_tokens"),
    (["--requests", "-3"], "--requests"),
    (["--trace", "/nonexistent/trace.csv"], "no such file"),
])
def test_bad_input_exits_2_with_a_message_naming_the_field(capsys, args, needle):
    assert main(["simulate", *args]) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err


def test_bad_trace_row_names_line_and_field(tmp_path, capsys):
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,10,5\n0.5,ten,5\n")
    assert main(["simulate", "--trace", str(trace)]) == 2
    err = capsys.readouterr().err
    assert "line 3" in err and "prompt_tokens" in err


def test_module_entry_point_exits_2_without_traceback():
    p = subprocess.run([sys.executable, "-m", "kvviz", "simulate", "--rate", "-1"],
                       capture_output=True, text=True)
    assert p.returncode == 2
    assert "rate" in p.stderr and "Traceback" not in p.stderr


def test_engine_jump_and_step_print_the_same_json_but_wall_time(capsys):
    args = ("--requests", "200", "--rate", "20", "--capacity-tokens", "20000",
            "--lane", "contiguous:buddy:pow2", "--lane", "paged:16")
    jump, step = (run_json(capsys, *args, "--engine", e) for e in ("jump", "step"))
    for r in jump + step:
        r.pop("wall_seconds")
    assert jump == step


def test_an_unknown_engine_exits_2(capsys):
    assert main(["simulate", "--engine", "warp"]) == 2
    assert "--engine" in capsys.readouterr().err


def test_each_lane_reports_its_own_simulated_seconds(capsys):
    rows = run_json(capsys, "--requests", "300", "--capacity-tokens", "40000", "--step-ms", "20",
                    "--lane", "contiguous:first-fit:max", "--lane", "paged:16")
    assert rows[0]["steps"] != rows[1]["steps"]  # the lanes finish at different steps
    for r in rows:
        assert r["simulated_seconds"] == pytest.approx(r["steps"] * 20 / 1000)
