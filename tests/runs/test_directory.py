"""kvviz.runs.directory: everything is listed and opened inside the runs directory only."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvviz.core.errors import KvvizError
from kvviz.runs import directory as d
from kvviz.store.writer import RunWriter
from tests.traces import samples as S


def test_list_runs_keeps_db_files_inside(tmp_path: Path):
    (tmp_path / "a.db").write_bytes(b"x")
    (tmp_path / "notes.txt").write_text("x")
    outside = tmp_path.parent / f"outside-{os.getpid()}.db"
    outside.write_bytes(b"x")
    (tmp_path / "link.db").symlink_to(outside)
    try:
        assert [r.name for r in d.list_runs(tmp_path)] == ["a.db"]
    finally:
        outside.unlink()


@pytest.mark.parametrize("name", ["../x.db", "/etc/passwd", "sub/a.db", "..", "", "a.txt",
                                  "missing.db", "link.db"])
def test_resolve_run_refuses_anything_but_a_recording_inside(tmp_path: Path, name: str):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.db").write_bytes(b"x")
    (tmp_path / "link.db").symlink_to("/etc/hostname")
    with pytest.raises(KvvizError):
        d.resolve_run(tmp_path, name)


def test_resolve_run_accepts_a_recording(tmp_path: Path):
    (tmp_path / "a.db").write_bytes(b"x")
    assert d.resolve_run(tmp_path, "a.db") == tmp_path / "a.db"


@settings(max_examples=40, deadline=None)
@given(st.text(max_size=40))
def test_any_name_resolves_inside_or_is_one_error(tmp_path_factory, name: str):
    root = tmp_path_factory.mktemp("runs")
    (root / "a.db").write_bytes(b"x")
    for resolve in (d.resolve_run, d.resolve_trace, d.resolve_snapshot):
        try:
            path = resolve(root, name)
        except KvvizError:
            continue
        assert path.resolve().parent == root.resolve()


def test_runs_dir_follows_the_environment(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("KVVIZ_RUNS_DIR", str(tmp_path / "r"))
    assert d.runs_dir() == (tmp_path / "r").resolve() and (tmp_path / "r").is_dir()


def test_traces_in_the_runs_directory_are_listed_recordings_are_not(tmp_path: Path):
    (tmp_path / "az.csv").write_bytes(S.azure(S.AZURE_ROWS))
    (tmp_path / "m.jsonl").write_bytes(S.mooncake([(0, 5, 5, [])]))
    (tmp_path / "run.db").write_bytes(b"")
    (tmp_path / "sub.csv").mkdir()
    assert sorted(t.name for t in d.list_traces(tmp_path)) == ["az.csv", "m.jsonl"]


@pytest.mark.parametrize("name", ["../az.csv", "run.db", "missing.csv", "", "sub.csv"])
def test_only_a_trace_file_inside_the_runs_directory_resolves(tmp_path: Path, name: str):
    (tmp_path / "run.db").write_bytes(b"")
    (tmp_path / "sub.csv").mkdir()
    with pytest.raises(KvvizError):
        d.resolve_trace(tmp_path, name)


def _recording(path: Path, mode: str) -> None:
    RunWriter(path, {"mode": mode, "lanes": []}).close("finished")


def test_node_recordings_are_the_recordings_in_node_mode(tmp_path: Path):
    _recording(tmp_path / "node-a.db", "node")
    _recording(tmp_path / "live-a.db", "sim")
    (tmp_path / "broken.db").write_bytes(b"not sqlite" * 20)
    assert d.node_recordings(tmp_path) == ["node-a.db"]


def test_kv_event_recordings_are_the_ones_holding_streams(tmp_path: Path):

    _recording(tmp_path / "plain.db", "sim")
    w = RunWriter(tmp_path / "events.db", {"mode": "kv-events", "lanes": []})
    w.kv_events()  # creates the KV-event tables
    w.close("finished")
    (tmp_path / "broken.db").write_bytes(b"not sqlite" * 20)
    assert d.kv_event_recordings(tmp_path) == ["events.db"]


def test_snapshots_are_listed_and_resolved_inside_only(tmp_path: Path):
    (tmp_path / "run-torchsnap-1.pickle").write_bytes(b"x")
    (tmp_path / "notes.txt").write_bytes(b"x")
    (tmp_path / "out.pkl").symlink_to("/etc/hostname")
    assert d.snapshot_files(tmp_path) == ["run-torchsnap-1.pickle"]
    assert d.resolve_snapshot(tmp_path, "run-torchsnap-1.pickle").is_file()
    for bad in ("out.pkl", "notes.txt", "../x.pickle", "missing.pickle"):
        with pytest.raises(KvvizError):
            d.resolve_snapshot(tmp_path, bad)


def test_a_new_recording_name_is_never_one_in_use(tmp_path: Path):
    first = d.unique_recording(tmp_path, "live")
    first.with_suffix(d.CONFIG_SUFFIX).write_text("{}")  # written before the recording
    second = d.unique_recording(tmp_path, "live")
    assert second != first and second.suffix == d.RUN_SUFFIX
