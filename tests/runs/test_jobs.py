"""kvviz.runs.jobs: the demo collector's and a scrape's lifecycles, and the status they show."""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from kvviz.runs import directory, jobs, process
from kvviz.runs.status import ERROR, NOT_STARTED, RUNNING, STOPPED, STOPPED_UNEXPECTEDLY
from kvviz.settings.collector import CollectorConfig, parse_lanes

FAKE = "tests.pages.fake_collector"


@pytest.fixture(autouse=True)
def _stop_children():
    yield
    process.stop_all()


def wait_for(cond, timeout_s: float = 30.0) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.1)
    return False


def test_collector_starts_records_and_stops(tmp_path: Path):
    coll = jobs.Collector(tmp_path, module=FAKE)
    assert coll.status().state == NOT_STARTED
    out = coll.start()
    try:
        assert out.parent == tmp_path and out.name.startswith("live-")
        s = coll.status()
        assert s.state == RUNNING and s.pid and s.uptime_s is not None
        assert wait_for(out.exists)
    finally:
        coll.stop()
    s = coll.status()
    assert s.state == STOPPED and s.recording == out.name


def test_the_collector_gets_its_settings_as_a_config_file_it_reads_back(tmp_path: Path):
    coll = jobs.Collector(tmp_path, module=FAKE)
    config = jobs.demo_config(mode="sim", lanes=parse_lanes(["paged:8"]), rate=5.0)
    out = coll.start(config)
    saved = CollectorConfig.load(out.with_suffix(directory.CONFIG_SUFFIX))
    assert saved == CollectorConfig(mode="sim", lanes=parse_lanes(["paged:8"]), rate=5.0, loop=True,
                                    max_num_seqs=jobs.DEMO.max_num_seqs, out=str(out),
                                    quiet=True)
    assert coll.config == config
    from kvviz.store.reader import RunReader

    assert wait_for(lambda: out.exists() and RunReader(out).lanes() == ["paged:8"])


def test_demo_settings_are_validated_before_anything_starts(tmp_path: Path):
    for bad in (dict(mode="fast"), dict(workload="nope"), dict(lanes=("paged:8",)),
                dict(lanes=()), dict(device="tpu"), dict(rate=-1.0)):
        with pytest.raises(ValueError, match=next(iter(bad))):
            jobs.demo_config(**bad)
    for texts in (["paged:x"], [], "paged:8", [8]):  # lane text is read at the edge, once
        with pytest.raises(ValueError, match="lanes"):
            parse_lanes(texts)
    assert list(tmp_path.iterdir()) == []


def test_restart_writes_a_new_recording(tmp_path: Path):
    coll = jobs.Collector(tmp_path, module=FAKE)
    first = coll.start()
    second = coll.restart()
    assert first != second and coll.status().state == RUNNING


def test_a_collector_that_cannot_start_is_an_error_with_its_last_message(tmp_path: Path):
    coll = jobs.Collector(tmp_path, module="kvviz_no_such_collector")
    coll.start()
    assert wait_for(lambda: coll.status().state != RUNNING)
    s = coll.status()
    assert s.state == ERROR and s.returncode != 0 and "No module named" in s.last_message
    assert s.exit_text == f"exit code {s.returncode}"


def test_a_collector_killed_from_outside_stopped_unexpectedly(tmp_path: Path):
    coll = jobs.Collector(tmp_path, module=FAKE)
    coll.start()
    os.kill(coll.status().pid, signal.SIGKILL)
    assert wait_for(lambda: coll.status().state != RUNNING)
    s = coll.status()
    assert s.state == STOPPED_UNEXPECTEDLY and s.exit_text == "killed by SIGKILL"


def test_ensure_started_starts_once(tmp_path: Path):
    coll = jobs.Collector(tmp_path, module=FAKE)
    coll.ensure_started()
    pid = coll.status().pid
    coll.ensure_started()
    assert coll.status().pid == pid
    process.stop_all()
    assert coll.status().state == STOPPED


def test_the_viewer_file_is_touched_by_viewers_and_removed_on_stop(tmp_path: Path):
    coll = jobs.Collector(tmp_path, module=FAKE)
    out = coll.start()
    try:
        viewer = out.with_suffix(directory.VIEWER_SUFFIX)
        assert viewer.exists()
        os.utime(viewer, (0, 0))
        coll.touch_viewer(every_s=0.0)
        assert viewer.stat().st_mtime > time.time() - 60
    finally:
        coll.stop()
    assert not viewer.exists()


def test_a_scrape_job_refuses_a_bad_url_before_starting(tmp_path: Path):
    job = jobs.ScrapeJob(tmp_path)
    with pytest.raises(ValueError):
        job.start("file:///etc/passwd")
    assert job.status().state == NOT_STARTED and job.restart() is None
    assert list(tmp_path.iterdir()) == []


def test_an_events_job_refuses_bad_arguments_before_starting(tmp_path: Path):
    job = jobs.EventsJob(tmp_path)
    for endpoints, ranks in (([], 1), (["tcp://127.0.0.1:5557"], 0)):
        with pytest.raises(ValueError):
            job.start(endpoints, ranks)
    assert job.status().state == NOT_STARTED and job.restart() is None
    assert list(tmp_path.iterdir()) == []


def test_an_events_job_records_into_the_runs_directory_and_stops(tmp_path: Path):
    job = jobs.EventsJob(tmp_path)
    out = job.start(["tcp://127.0.0.1:1"])  # nothing publishes there: it waits, recording
    assert out.parent == tmp_path and out.name.startswith("kv-events-")
    assert job.status().target == "tcp://127.0.0.1:1"
    assert wait_for(lambda: out.name in directory.kv_event_recordings(tmp_path))
    job.stop()
    s = job.status()
    assert s.state == STOPPED and s.recording == out.name
