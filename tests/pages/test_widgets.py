"""pages/widgets.job_status: one status box for every background job."""
from __future__ import annotations

import time

import pytest

from kvviz.node.trust import plain_markdown as md
from kvviz.runs.status import (
    ERROR,
    NEVER,
    RUNNING,
    STOPPED,
    STOPPED_UNEXPECTEDLY,
)
from pages.widgets import duration_text, status_text

RUN = NEVER._replace(state=RUNNING, pid=42, started_at=time.time() - 75,
                     recording="node-1.db", target="http://gpu7:8000/metrics")


def test_a_running_job_shows_pid_uptime_target_recording_and_last_write():
    s = RUN._replace(started_at=time.time() - 75)  # RUN's start is import time, long ago
    text = status_text("Scrape", s, 3.0)
    assert text.startswith("Scrape running (pid 42, up 1 min 1")
    assert md("node-1.db") in text and md(RUN.target) in text
    assert text.endswith("last written 3 s ago")


@pytest.mark.parametrize("state, rc, shown", [
    (STOPPED, 0, "Collector stopped (exit code 0)"),
    (STOPPED_UNEXPECTEDLY, -9, "Collector stopped unexpectedly (killed by SIGKILL)"),
    (ERROR, 2, "Collector error (exit code 2)")])
def test_an_ended_job_says_how_it_ended(state, rc, shown):
    s = RUN._replace(state=state, returncode=rc, target=None)
    assert status_text("Collector", s, None).startswith(shown)


def test_remote_text_in_the_box_is_escaped():
    s = RUN._replace(target="http://x/*bold*_[link](javascript:alert(1))")
    text = status_text("Scrape", s, None)
    assert "*bold*" not in text and "[link](" not in text


def test_a_job_never_started_says_so():
    assert status_text("Collector", NEVER, None) == "Collector not started."


@pytest.mark.parametrize("seconds, text", [(0, "0 s"), (59.9, "59 s"), (61, "1 min 01 s"),
                                           (3 * 3600 + 7 * 60, "3 h 07 min")])
def test_durations_read_plainly(seconds, text):
    assert duration_text(seconds) == text


def _stopped_box():
    from types import SimpleNamespace

    from kvviz.runs.status import STOPPED, JobStatus
    from pages import widgets
    line = ("kvviz attach: stopped: stopped by SIGTERM; 5 of 5 scrapes ok; recording "
            "/a/long/path/to/the/runs/directory/node-20261206-014949.db")
    widgets.job_status_box("Attach", SimpleNamespace(status=lambda: JobStatus(
        STOPPED, 1, 0, 0.0, None, "http://n:8000/metrics", line)), "att")


def test_why_a_job_stopped_is_shown_whole_not_scrolled():
    from streamlit.testing.v1 import AppTest
    at = AppTest.from_function(_stopped_box).run()
    (code,) = at.code
    assert code.value.endswith("node-20261206-014949.db") and code.proto.wrap_lines


def _running_box():
    import time as _t
    from types import SimpleNamespace

    from kvviz.runs.status import RUNNING, JobStatus
    from pages import widgets
    log = "measuring block 16\nmeasuring block 32\nmeasuring block 64: 3 of 9"
    widgets.job_status_box("Advisor", SimpleNamespace(status=lambda: JobStatus(
        RUNNING, 1, None, _t.time(), None, None, log)), "adv")


def test_a_running_jobs_progress_is_its_latest_line_not_a_log_block():
    from streamlit.testing.v1 import AppTest
    at = AppTest.from_function(_running_box).run()
    assert not at.code
    assert [c.value.replace("\\", "") for c in at.caption] == ["measuring block 64: 3 of 9"]
