"""simulate/collect --trace: no silent clipping, skipped rows reported, exit 2 on bad rows."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kvviz.commands.cli import main
from kvviz.commands.simulate import format_table
from tests.traces import samples as S

ROOT = Path(__file__).resolve().parents[2]
ROWS = [(f"2023-11-16 18:15:{s:02d}.1234567", 100 + 300 * s, 50 + s) for s in range(12)]


@pytest.fixture
def azure(tmp_path):
    p = tmp_path / "az.csv"
    p.write_bytes(S.azure(ROWS))
    return p


def run_json(capsys, *args) -> list[dict]:
    assert main(["simulate", "--json", "--capacity-tokens", "60000", *map(str, args)]) == 0
    return [json.loads(x) for x in capsys.readouterr().out.splitlines()]


def test_max_seq_len_defaults_to_the_longest_request_so_nothing_is_clipped(capsys, azure):
    r = run_json(capsys, "--trace", azure)[0]
    assert r["max_seq_len"] == max(p + o for _, p, o in ROWS)
    assert r["clipped_requests"] == 0 and r["trace_format"] == "azure"


def test_a_limit_that_clips_reports_how_many(capsys, azure):
    r = run_json(capsys, "--trace", azure, "--max-seq-len", 1000)[0]
    assert r["clipped_requests"] == sum(p + o > 1000 for _, p, o in ROWS)


def test_skipped_rows_are_reported(capsys, tmp_path):
    p = tmp_path / "b.csv"
    p.write_bytes(S.burstgpt([(0, "ChatGPT", 5, 0), (1, "GPT-4", 5, 5), (2, "ChatGPT", 5, 5)]))
    r = run_json(capsys, "--trace", p, "--model-filter", "ChatGPT")[0]
    assert (r["skipped_failed_rows"], r["skipped_other_model_rows"], r["requests"]) == (1, 1, 1)


def test_a_bad_row_exits_2_naming_file_line_and_column(capsys, tmp_path):
    p = tmp_path / "a.csv"
    p.write_bytes(S.azure([ROWS[0], (ROWS[1][0], 0, 5)]))
    assert main(["simulate", "--trace", str(p)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"kvviz simulate: error: {p}: line 3: column 'ContextTokens'")


@pytest.mark.parametrize("flag, value", [("--limit", "0"), ("--time-scale", "0"),
                                          ("--duration-s", "-1"), ("--start-s", "nan")])
def test_bad_window_flags_exit_2_naming_the_flag(capsys, azure, flag, value):
    assert main(["simulate", "--trace", str(azure), flag, value]) == 2
    assert f"error: {flag}:" in capsys.readouterr().err


def test_table_columns_stay_aligned_for_seven_digit_counts():
    shares = {"used": 0.5, "reserved": 0.1, "internal": 0.0, "free": 0.4, "tail_waste": 0.01,
              "external_frag_index": 0.0}
    row = {"lane": "paged:16", "used_share": 0.5, "reserved_share": 0.1, "internal_share": 0.0,
           "free_share": 0.4, "tail_waste_share": 0.01, "external_frag_index_mean": 0.0,
           "admit_failures": {"capacity": 12_345_678, "fragmentation": 0, "policy": 3},
           "preemptions": 1_234_567, "steps": 99_999_999, "clipped_requests": 5,
           "pressure_steps": 12, "pressure_step_shares": shares, "prefix_hit_rate": 0.25}
    lines = format_table([row, dict(row, lane="contiguous:first-fit:max", steps=1)]).splitlines()
    header, rows = lines[0], [ln for ln in lines if ln.startswith("  all steps")]
    ends = [[i for i in range(len(ln)) if ln[i] != " " and (i + 1 == len(ln) or ln[i + 1] == " ")]
            for ln in (header, *rows)]
    assert ends[0][-5:] == ends[1][-5:] == ends[2][-5:]  # right edges of the count columns
    assert "12345678" in rows[0] and "1234567" in rows[0]


def test_save_trace_of_hash_chains_needs_jsonl(capsys, tmp_path):
    p = tmp_path / "m.jsonl"
    p.write_bytes(S.mooncake([(0, 600, 5, [1, 2])]))
    assert main(["simulate", "--trace", str(p), "--save-trace", str(tmp_path / "o.csv")]) == 2
    assert "use a .jsonl name" in capsys.readouterr().err


def test_collect_reads_a_public_trace_with_the_same_flags(tmp_path, azure):
    # a child process: under pytest, `collectors` would resolve to tests/collectors
    code = (
        "import json, sys\n"
        "from kvviz.commands.cli import build_parser\n"
        "from collectors.launch import build\n"
        "from kvviz.settings.flags import settings_of\n"
        "col = build(settings_of(build_parser('collect').parse_args(sys.argv[1:])))\n"
        "w = col.sim.workload\n"
        "print(json.dumps([len(w), w.clipped, col.resolved.engine.max_seq_len]))\n")
    out = subprocess.run(
        [sys.executable, "-c", code, "collect", "--mode", "sim", "--trace", str(azure),
         "--limit", "5", "--quiet", "--out", str(tmp_path / "r.db")],
        capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [5, 0, max(p + o for _, p, o in ROWS[:5])]
    assert not (tmp_path / "r.db").exists()  # build validates, creates nothing


def test_a_progress_bar_goes_to_stderr_only_on_a_terminal(capsys, monkeypatch, azure):
    assert main(["simulate", "--trace", str(azure), "--capacity-tokens", "60000"]) == 0
    assert "reading" not in capsys.readouterr().err  # not a terminal: no bar
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert main(["simulate", "--trace", str(azure), "--capacity-tokens", "60000"]) == 0
    captured = capsys.readouterr()
    assert f"reading {azure}" in captured.err and "reading" not in captured.out
