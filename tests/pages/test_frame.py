"""Every page runs inside app.py (pages/frame.py): a page script that finds its session not
framed by app.py hands over to app.py, and app.py sends the session on to the page asked for.
The browser side (a direct link on a fresh server) is tests/e2e/test_browser_frame.py."""
from __future__ import annotations

from streamlit.testing.v1 import AppTest

from pages.frame import FRAMED_KEY, WANTED_KEY
from tests.pages.apptest_fixtures import framed
from tests.pages.pagehelpers import ROOT, TIMEOUT, no_exception


def test_a_page_not_framed_by_app_py_hands_over_before_drawing_anything():
    at = AppTest.from_file(str(ROOT / "pages" / "learn.py"), default_timeout=TIMEOUT).run()
    assert at.session_state[WANTED_KEY] == "pages/learn.py"
    assert not at.title  # nothing of the page ran


def test_a_framed_page_runs_and_asks_for_nothing():
    at = framed(AppTest.from_file(str(ROOT / "pages" / "learn.py"), default_timeout=TIMEOUT))
    at.run()
    no_exception(at)
    assert at.title and WANTED_KEY not in at.session_state


def test_app_py_frames_the_session_and_goes_on_to_the_page_asked_for(runs):
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    at.session_state[WANTED_KEY] = "pages/learn.py"
    at.run()
    no_exception(at)
    assert at.session_state[FRAMED_KEY] is True and WANTED_KEY not in at.session_state
    assert "Learn" in at.title[0].value
