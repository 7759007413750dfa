"""Paths the CLI reads and writes: regular-file inputs only, the overwrite rule, atomic writes,
clear trace-content errors, and escaped output. Each case: one error line (exit 2) or success.
"""
from __future__ import annotations

import importlib.util
import os
import stat
from pathlib import Path

import pytest

from kvviz.core import safeio
from tests.fuzz.hostile import TRACE_OK, check_property, make_recording, private_device, run_cli

ROOT = Path(__file__).resolve().parents[2]


def _err(argv: list[str]) -> str:
    """Run; assert exit 2 with one error line; return that line."""
    res = run_cli(argv)
    check_property(argv[0], argv, res)
    assert res.code == 2, res.out
    return res.err.strip()


@pytest.fixture()
def fifo(tmp_path: Path) -> Path:
    p = tmp_path / "pipe"
    os.mkfifo(p)
    return p


@pytest.fixture()
def rec(tmp_path: Path) -> Path:
    return make_recording(tmp_path / "run.db", "msg \x1b[31mred\x1b[0m")


# ---- inputs ------------------------------------------------------------------------------
@pytest.mark.parametrize("cmd", [["simulate", "--trace"], ["torch-snapshot"], ["info"],
                                 ["export", "--csv", "out", "--"]])
def test_fifo_input_is_refused_without_blocking(cmd, fifo: Path, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert "FIFO" in _err([*cmd, str(fifo)])


@pytest.mark.parametrize("path, words", [("/dev/zero", "character device"),
                                         ("/dev/urandom", "character device"),
                                         ("/proc/self/mem", "cannot read"),
                                         ("/", "directory")])
def test_non_regular_trace_is_refused(path, words) -> None:
    assert words in _err(["simulate", "--trace", path])


def test_directory_snapshot_and_recording_are_refused(tmp_path: Path) -> None:
    assert "directory" in _err(["torch-snapshot", str(tmp_path)])
    assert "directory" in _err(["info", str(tmp_path)])


# ---- trace contents ----------------------------------------------------------------------
@pytest.mark.parametrize("text, words", [
    ("arrival_s,prompt_tokens,output_tokens\n0,1," + "9" * 140_000 + "\n", "line 2"),
    ('{"arrival_s": ' + "[" * 100_000 + "\n", "line 1: JSON nested too deeply"),
    (f"arrival_s,prompt_tokens,output_tokens\n0,{2**63},5\n", "line 2: column 'prompt_tokens'"),
    (f"arrival_s,prompt_tokens,output_tokens\n0,5,{2**64 + 1}\n", "column 'output_tokens'"),
    ("arrival_s,prompt_tokens,output_tokens\n0,-5,5\n", "column 'prompt_tokens'"),
    ("arrival_s,prompt_tokens,output_tokens\n0,5,5\n0,abc,5\n", "line 3: column 'prompt_tokens'"),
    ('{"arrival_s": 0, "prompt_tokens": 3, "output_tokens": true}\n', "'output_tokens'"),
    ('{"arrival_s": 0, "prompt_tokens": [1], "output_tokens": 2}\n', "'prompt_tokens'"),
    ('{"arrival_s": 1e999, "prompt_tokens": 1, "output_tokens": 2}\n', "'arrival_s'"),
    ("arrival_s,prompt_tokens,output_tokens\n0,5\x00,5\n", "line 2: a NUL byte"),
    ('{"arrival_s": 0,, }\n', "line 1: not valid JSON at column"),
])
def test_bad_trace_content_names_file_line_and_field(tmp_path: Path, text, words) -> None:
    trace = tmp_path / ("t.jsonl" if text.startswith("{") else "t.csv")
    trace.write_text(text)
    line = _err(["simulate", "--trace", str(trace)])
    assert str(trace) in line and words in line


def test_non_utf8_trace_names_the_line(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_bytes(b"arrival_s,prompt_tokens,output_tokens\n0,1,1\n\xff\xfe\n")
    assert "line 3: not UTF-8" in _err(["simulate", "--trace", str(trace)])


# ---- outputs and the overwrite rule ------------------------------------------------------
def test_collect_never_replaces_a_device(tmp_path) -> None:
    dev = private_device(tmp_path)  # never the system's /dev/null: a regression would replace it
    kind = os.stat(dev).st_mode
    _err(["collect", "--mode", "sim", "--quiet", "--out", dev, "--overwrite"])
    assert os.stat(dev).st_mode == kind and not stat.S_ISREG(kind)


@pytest.mark.parametrize("kind", ["fifo", "symlink", "dir", "foreign"])
def test_collect_overwrite_refuses_what_is_not_a_recording(tmp_path: Path, rec: Path,
                                                           kind) -> None:
    out = tmp_path / "x.db"
    if kind == "fifo":
        os.mkfifo(out)
    elif kind == "symlink":
        out.symlink_to(rec)
    elif kind == "dir":
        out.mkdir()
    else:
        out.write_text("my thesis\n")
    _err(["collect", "--mode", "sim", "--quiet", "--duration", "0.2", "--out", str(out),
          "--overwrite"])
    assert kind != "foreign" or out.read_text() == "my thesis\n"
    assert kind != "symlink" or (out.is_symlink() and safeio.is_kvviz_recording(rec))


@pytest.mark.parametrize("start", ["recording", "empty"])
def test_collect_overwrite_replaces_a_recording_or_empty_file(tmp_path: Path, rec: Path,
                                                              start) -> None:
    out = rec if start == "recording" else tmp_path / "empty.db"
    if start == "empty":
        out.write_bytes(b"")
    argv = ["collect", "--mode", "sim", "--quiet", "--requests", "5", "--rate", "inf",
            "--duration", "1", "--steps-per-s", "0", "--out", str(out), "--overwrite"]
    res = run_cli(argv)
    check_property("collect", argv, res)
    assert res.code == 0 and safeio.is_kvviz_recording(out)


@pytest.mark.parametrize("out, words", [
    ("{tmp}/" + "n" * 300 + ".db", "too long"),
    ("{tmp}/file.txt/run.db", "cannot create directory"),
])
def test_collect_bad_out_paths(tmp_path: Path, out, words) -> None:
    (tmp_path / "file.txt").write_text("x")
    assert words in _err(["collect", "--mode", "sim", "--quiet",
                          "--out", out.format(tmp=tmp_path)])


def test_save_trace_refuses_an_existing_file_and_keeps_it(tmp_path: Path, rec: Path) -> None:
    before = rec.read_bytes()
    assert "already exists" in _err(["simulate", "--requests", "5", "--save-trace", str(rec)])
    assert "not a kvviz trace" in _err(["simulate", "--requests", "5", "--save-trace",
                                        str(rec), "--overwrite"])
    assert rec.read_bytes() == before


def test_save_trace_overwrite_replaces_a_trace_atomically(tmp_path: Path) -> None:
    out = tmp_path / "t.csv"
    out.write_text(TRACE_OK)
    argv = ["simulate", "--requests", "7", "--save-trace", str(out), "--overwrite", "--json"]
    res = run_cli(argv)
    check_property("simulate", argv, res)
    assert res.code == 0 and len(out.read_text().splitlines()) == 8
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.csv"]  # no temporary left


def test_save_trace_to_a_device_is_one_error(tmp_path) -> None:
    dev = private_device(tmp_path)
    assert "dev-null" in _err(["simulate", "--requests", "5", "--save-trace", dev])


def test_export_refuses_existing_files_unless_overwrite(tmp_path: Path, rec: Path) -> None:
    out = tmp_path / "exp"
    assert run_cli(["export", str(rec), "--csv", str(out)]).code == 0
    assert "already exists" in _err(["export", str(rec), "--csv", str(out)])
    assert run_cli(["export", str(rec), "--csv", str(out), "--overwrite"]).code == 0


def test_export_never_replaces_a_foreign_file(tmp_path: Path, rec: Path) -> None:
    out = tmp_path / "exp"
    out.mkdir()
    (out / "samples.parquet").write_text("my data")
    assert "not a Parquet export" in _err(["export", str(rec), "--parquet", str(out),
                                           "--overwrite"])
    assert (out / "samples.parquet").read_text() == "my data"
    assert not (out / "run.json").exists()  # checked before anything was written


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_export_overwrite_replaces_an_earlier_export_only(tmp_path: Path, rec: Path,
                                                          fmt) -> None:
    out = tmp_path / "exp"
    assert run_cli(["export", str(rec), f"--{fmt}", str(out)]).code == 0
    assert run_cli(["export", str(rec), f"--{fmt}", str(out), "--overwrite"]).code == 0
    (out / f"events.{fmt}").write_bytes(b"PAR1 other" if fmt == "parquet" else b"name,age\n")
    _err(["export", str(rec), f"--{fmt}", str(out), "--overwrite"])
    assert (out / f"events.{fmt}").read_bytes() in (b"PAR1 other", b"name,age\n")


def test_scrape_out_refuses_a_fifo_and_a_foreign_log(tmp_path: Path) -> None:
    pipe = tmp_path / "p.jsonl"
    os.mkfifo(pipe)
    assert "FIFO" in _err(["scrape", "localhost:1", "--count", "1", "--out", str(pipe)])
    notes = tmp_path / "notes.jsonl"
    notes.write_text("my notes\n")
    assert "append" in _err(["scrape", "localhost:1", "--count", "1", "--out", str(notes)])
    assert notes.read_text() == "my notes\n"


def test_atomic_write_failure_leaves_the_old_file(tmp_path: Path) -> None:
    out = tmp_path / "t.csv"
    out.write_text("old")

    def fail(tmp: Path) -> None:
        tmp.write_text("half")
        raise OSError(28, "No space left on device")

    with pytest.raises(safeio.PathError, match="No space left"):
        safeio.atomic_write(out, fail)
    assert out.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["t.csv"]


# ---- escaping ----------------------------------------------------------------------------
def test_printable_escapes_controls_and_keeps_text() -> None:
    assert safeio.printable("a\x1b[2Jb\n\u202e é") == "a\\x1b[2Jb\\x0a\\u202e é"


def test_info_escapes_strings_from_the_recording(rec: Path) -> None:
    res = run_cli(["info", str(rec)])
    assert res.code == 0 and "\x1b" not in res.out and "\\x1b[31mred" in res.out


def test_torch_snapshot_escapes_names_and_types(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("snaps", ROOT / "tests/torchsnap/snaps.py")
    snaps = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(snaps)
    snap = snaps.make_snapshot()
    for seg in snap["segments"]:
        seg["segment_type"] = "\x1b]0;pwned\x07" + seg["segment_type"]
    path = tmp_path / "snap\x1b[31m.pickle"
    path.write_bytes(snaps.dumps(snap))
    res = run_cli(["torch-snapshot", str(path)])
    check_property("torch-snapshot", ["torch-snapshot", str(path)], res)
    assert "\x1b" not in res.out + res.err and "\x07" not in res.out + res.err


def test_error_quoting_a_file_name_is_escaped(tmp_path: Path) -> None:
    trace = tmp_path / "t\x1b[31m.csv"
    trace.write_text("nope\n")
    assert "\\x1b[31m" in _err(["simulate", "--trace", str(trace)])


def test_info_counts_the_node_samples_of_a_scrape_recording(tmp_path: Path,
                                                            monkeypatch) -> None:
    from tests.fuzz.hostile import install_fakes

    install_fakes(monkeypatch)  # a scrape of the vLLM fixture, no network
    out = tmp_path / "node.db"
    argv = ["scrape", "127.0.0.1:1", "--count", "2", "--interval", "0.01", "--quiet",
            "--nvml", "never", "--out", str(out)]
    assert run_cli(argv).code == 0
    res = run_cli(["info", str(out)])
    assert res.code == 0 and "2 scrapes (2 ok)" in res.out, res.out + res.err


@pytest.mark.parametrize("sql, params", [
    ("UPDATE run SET meta = '[]'", ()),
    ("UPDATE run SET meta = ?", ('{"lanes": 5}',)),
    ("UPDATE samples SET t = 'abc'", ()),
    ("UPDATE run SET heartbeat_unix = 'abc'", ()),
    ("UPDATE run SET meta = ?", ("[" * 100_000 + "]" * 100_000,)),
    ("UPDATE run SET status = 'running\x1b[2J'", ()),
])
@pytest.mark.parametrize("cmd", [["info"], ["info", "--json"], ["export", "--csv", "exp"]])
def test_hand_edited_recording_is_a_result_or_one_error(tmp_path: Path, rec: Path, sql, params,
                                                         cmd, monkeypatch) -> None:
    import sqlite3

    conn = sqlite3.connect(rec)
    conn.execute(sql, params)
    conn.commit()
    conn.close()
    monkeypatch.chdir(tmp_path)
    argv = [cmd[0], str(rec), *cmd[1:]]
    check_property(cmd[0], argv, run_cli(argv))
