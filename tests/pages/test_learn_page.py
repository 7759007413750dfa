"""Learn page under AppTest: Back / Next walk the story; the failure shows its record."""
from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from kvviz import story
from tests.pages.apptest_fixtures import framed

PAGE = str(Path(__file__).resolve().parents[2] / "pages" / "learn.py")
N = len(story.build_story())


@pytest.fixture
def at() -> AppTest:
    app = framed(AppTest.from_file(PAGE, default_timeout=60))
    app.run()
    assert not app.exception
    return app


def button(app: AppTest, label: str):
    return next(b for b in app.button if b.label == label)


def go(app: AppTest, label: str, times: int = 1) -> None:
    for _ in range(times):
        button(app, label).click().run()
        assert not app.exception


def test_first_step_renders(at: AppTest) -> None:
    assert at.title[0].value.startswith("Learn")
    assert at.session_state["learn_step"] == 0
    assert button(at, "Back").disabled and not button(at, "Next").disabled
    assert len(at.get("plotly_chart")) == 1


def test_next_advances_and_back_goes_back(at: AppTest) -> None:
    go(at, "Next")
    assert at.session_state["learn_step"] == 1
    assert at.subheader[0].value == story.build_story()[1].title
    go(at, "Next")
    go(at, "Back")
    assert at.session_state["learn_step"] == 1
    assert at.subheader[0].value == story.build_story()[1].title


def test_fragmentation_step_shows_the_admission_record(at: AppTest) -> None:
    go(at, "Next", 3)
    assert "FRAGMENTATION" in at.error[0].value
    metrics = {m.label: m.value for m in at.metric}
    assert metrics == {"need": "14 slots", "free in total": "16 slots",
                       "largest hole": "12 slots"}
    assert "reason=Reason.FRAGMENTATION" in at.code[0].value


def test_paging_step_admits_d_and_draws_both_lines(at: AppTest) -> None:
    go(at, "Next", 4)
    assert "ok" in at.success[0].value and not at.error
    assert len(at.get("plotly_chart")) == 2


def index(key: str) -> int:
    return [s.key for s in story.build_story()].index(key)


def test_paging_step_says_d_rounds_up_to_blocks(at: AppTest) -> None:
    go(at, "Next", index("paged"))
    assert at.success[0].value == ("admit(D, 14 tokens) → ok: 14 tokens round up to 4 blocks "
                                   "of 4 = 16 slots")


@pytest.mark.parametrize("key, charts", [("prefix", 3), ("preempt", 2), ("policy", 1)])
def test_course_steps_draw_the_engines_pictures(at: AppTest, key: str, charts: int) -> None:
    go(at, "Next", index(key))
    assert at.subheader[0].value == story.build_story()[index(key)].title
    assert len(at.get("plotly_chart")) == charts
    if key == "policy":
        assert "reason **POLICY**" in at.error[0].value
        assert "9 tokens round up to 3 blocks of 4 = 12 slots" in at.error[0].value
        metrics = {m.label: m.value for m in at.metric}
        assert metrics == {"need": "12 slots", "free in total": "16 slots",
                           "largest hole": "16 slots"}


def test_block_size_slider_updates_the_numbers(at: AppTest) -> None:
    go(at, "Next", index("block-size"))
    before = {m.label: m.value for m in at.metric}
    at.select_slider[0].set_value(128).run()
    after = {m.label: m.value for m in at.metric}
    assert not at.exception and before["tail waste"] != after["tail waste"]


def test_last_step_answers_four_questions_and_next_stops(at: AppTest) -> None:
    go(at, "Next", N - 1)
    assert at.session_state["learn_step"] == N - 1
    assert len(at.expander) == 4
    assert button(at, "Next").disabled
