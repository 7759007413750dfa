"""kvviz.runs.status: a job's state follows from its return code and who stopped it."""
from __future__ import annotations

import pytest

from kvviz.runs.status import (
    ERROR,
    NEVER,
    RUNNING,
    STOPPED,
    STOPPED_UNEXPECTEDLY,
    JobStatus,
    state_of,
)


@pytest.mark.parametrize("rc, asked, state", [
    (None, False, RUNNING), (None, True, RUNNING),  # a stop under way: still running
    (0, False, STOPPED),  # finished, or stopped itself (idle stop, parent gone)
    (-15, True, STOPPED), (-9, True, STOPPED),  # stopped here (SIGTERM, then SIGKILL)
    (-9, False, STOPPED_UNEXPECTEDLY),  # killed by someone else
    (2, False, ERROR), (1, False, ERROR),  # an error line, a traceback
    (2, True, STOPPED),  # it failed while being stopped: the stop is what was asked
])
def test_state_of_a_launched_job(rc, asked, state):
    assert state_of(rc, asked) == state


def test_exit_text_names_the_signal_or_the_code():
    s = NEVER._replace(state=STOPPED, pid=1)
    assert s._replace(returncode=-9).exit_text == "killed by SIGKILL"
    assert s._replace(returncode=3).exit_text == "exit code 3"
    assert s._replace(returncode=None).exit_text == ""
    assert isinstance(s, JobStatus) and NEVER.uptime_s is None
