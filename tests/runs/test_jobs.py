"""kvviz.live: recordings stay inside the runs directory; the collector's lifecycle."""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from kvviz import live
from kvviz.errors import KvvizError

FAKE = "tests.pages.fake_collector"


def test_list_runs_keeps_db_files_inside(tmp_path: Path):
    (tmp_path / "a.db").write_bytes(b"x")
    (tmp_path / "notes.txt").write_text("x")
    outside = tmp_path.parent / f"outside-{os.getpid()}.db"
    outside.write_bytes(b"x")
    (tmp_path / "link.db").symlink_to(outside)
    try:
        assert [r.name for r in live.list_runs(tmp_path)] == ["a.db"]
    finally:
        outside.unlink()


@pytest.mark.parametrize("name", ["../x.db", "/etc/passwd", "sub/a.db", "..", "", "a.txt",
                                  "missing.db", "link.db"])
def test_resolve_run_refuses_anything_but_a_recording_inside(tmp_path: Path, name: str):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.db").write_bytes(b"x")
    (tmp_path / "link.db").symlink_to("/etc/hostname")
    with pytest.raises(KvvizError):
        live.resolve_run(tmp_path, name)


def test_resolve_run_accepts_a_recording(tmp_path: Path):
    (tmp_path / "a.db").write_bytes(b"x")
    assert live.resolve_run(tmp_path, "a.db") == tmp_path / "a.db"


def test_runs_dir_follows_the_environment(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("KVVIZ_RUNS_DIR", str(tmp_path / "r"))
    assert live.runs_dir() == (tmp_path / "r").resolve() and (tmp_path / "r").is_dir()


def test_options_validate_and_become_flags(tmp_path: Path):
    opts = live.CollectorOptions(mode="sim", workload="alpaca-like", lanes=("paged:8",),
                                 rate=5.0)
    argv = opts.argv(tmp_path / "x.db")
    assert argv[:3] == ["--out", str(tmp_path / "x.db"), "--quiet"]
    assert ["--mode", "sim"] == argv[3:5] and "--loop" in argv
    assert argv[argv.index("--lane") + 1] == "paged:8"
    assert "--device" not in live.CollectorOptions().argv(tmp_path / "x.db")
    for bad in (dict(mode="fast"), dict(workload="nope"), dict(lanes=("paged:x",)),
                dict(lanes=()), dict(device="tpu")):
        with pytest.raises(ValueError):
            live.CollectorOptions(**bad)


def wait_for(cond, timeout_s: float = 30.0) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.1)
    return False


def test_collector_starts_records_and_stops(tmp_path: Path):
    coll = live.Collector(tmp_path, module=FAKE)
    assert coll.status().state == "not started"
    out = coll.start(live.CollectorOptions())
    try:
        assert out.parent == tmp_path and out.name.startswith("live-")
        assert coll.status().state == "running"
        assert wait_for(out.exists)
    finally:
        coll.stop()
    st = coll.status()
    assert st.state == "stopped" and st.recording == out.name


def test_restart_writes_a_new_recording(tmp_path: Path):
    coll = live.Collector(tmp_path, module=FAKE)
    try:
        first = coll.start(live.CollectorOptions())
        second = coll.restart()
        assert first != second and coll.status().state == "running"
    finally:
        coll.stop()


def test_dead_collector_is_stopped_with_its_last_message(tmp_path: Path):
    coll = live.Collector(tmp_path, module="kvviz_no_such_collector")
    coll.start(live.CollectorOptions())
    assert wait_for(lambda: coll.status().state == "stopped")
    st = coll.status()
    assert st.returncode != 0 and "No module named" in st.last_message


def test_ensure_started_starts_once(tmp_path: Path):
    coll = live.Collector(tmp_path, module=FAKE)
    try:
        coll.ensure_started(live.CollectorOptions())
        pid = coll.status().pid
        coll.ensure_started(live.CollectorOptions())
        assert coll.status().pid == pid
    finally:
        live.stop_all()
    assert coll.status().state == "stopped"


def test_nvml_probe_answers_plainly():
    probe = live.nvml_probe()
    assert probe["ok"] or probe["error"]


def test_the_viewer_file_is_touched_by_viewers_and_removed_on_stop(tmp_path: Path):
    coll = live.Collector(tmp_path, module=FAKE)
    out = coll.start(live.CollectorOptions())
    try:
        viewer = out.with_suffix(live.VIEWER_SUFFIX)
        assert viewer.exists()
        os.utime(viewer, (0, 0))
        coll.touch_viewer(every_s=0.0)
        assert viewer.stat().st_mtime > time.time() - 60
    finally:
        coll.stop()
    assert not viewer.exists()


def test_the_live_page_touches_the_viewer_file(runs: Path):
    from pagehelpers import no_exception, page

    from pages import common

    at = page("pages/live.py")
    no_exception(at)
    viewer = common.collector().viewer
    assert viewer is not None and viewer.exists()
    os.utime(viewer, (0, 0))
    common.collector()._touched = 0.0  # let the next touch through at once
    at.run()
    assert viewer.stat().st_mtime > time.time() - 60
