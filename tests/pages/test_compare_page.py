"""Compare page under AppTest: lanes run, the advisor recommends, bad traces show st.error."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from kvviz import advisor

PAGE = str(Path(__file__).resolve().parents[2] / "pages" / "compare.py")


@pytest.fixture
def at(tmp_path, monkeypatch) -> AppTest:
    monkeypatch.setenv("KVVIZ_CACHE_DIR", str(tmp_path))  # never the user's bench cache
    app = AppTest.from_file(PAGE, default_timeout=120)
    app.run()
    assert not app.exception
    next(n for n in app.number_input if n.label == "Requests").set_value(200)
    app.run()
    return app


def button(app: AppTest, label: str):
    return next(b for b in app.button if b.label == label)


def test_loads_with_tabs_and_no_results_yet(at: AppTest) -> None:
    assert at.title[0].value == "Compare allocators"
    assert [t.label for t in at.tabs] == ["Allocators", "Block-size advisor"]
    assert "200 requests" in at.caption[0].value
    assert not at.get("plotly_chart")


def test_run_comparison_draws_figures_and_table(at: AppTest) -> None:
    lanes = at.multiselect[0].value
    button(at, "Run comparison").click().run()
    assert not at.exception
    assert len(at.get("plotly_chart")) == 3
    assert at.dataframe[0].value["lane"].tolist() == lanes
    assert any("SOSP'23" in c.value for c in at.caption)
    at.run()  # a rerun hits the cache (and replays nothing stale)
    assert not at.exception and len(at.get("plotly_chart")) == 3


def test_bad_trace_shows_error_naming_line_and_field(at: AppTest) -> None:
    at.session_state["compare_test_upload"] = (
        "bad.csv", b"arrival_s,prompt_tokens,output_tokens\n0,5,5\n1,x,5\n")
    at.run()
    assert not at.exception
    msg = at.error[0].value
    assert "bad.csv: line 3: field 'prompt_tokens' is not a number" in msg
    assert not at.tabs  # nothing else runs on a bad trace


def test_good_trace_is_used(at: AppTest) -> None:
    at.session_state["compare_test_upload"] = (
        "ok.jsonl", b'{"arrival_s": 0, "prompt_tokens": 30, "output_tokens": 9}\n' * 5)
    at.run()
    assert not at.exception and not at.error
    assert "5 requests" in at.caption[0].value


def test_advisor_with_cached_kernel_times_recommends(at: AppTest, tmp_path) -> None:
    cmd = advisor.bench_command("cpu")
    key = advisor.cache_key(cmd)
    points = [[b, 4.0 if b < 16 else 1.0, 1.0] for b in advisor.BLOCK_SIZES]
    advisor.cache_path(key, tmp_path).write_text(
        json.dumps({"key": key, "measured_at": "then", "points": points}), encoding="utf-8")
    at.run()
    assert button(at, "Measure kernel time again")
    button(at, "Run block-size sweep").click().run()
    assert not at.exception
    assert "Recommended block size: 16." in at.success[0].value
    assert len(at.get("plotly_chart")) == 1


def test_failing_bench_warns_and_keeps_the_memory_side(at: AppTest) -> None:
    at.session_state["advisor_test_command"] = [sys.executable, "-c", "import sys; sys.exit(3)"]
    at.run()
    button(at, "Measure kernel time on this machine").click().run()
    assert not at.exception
    assert "status 3" in at.warning[0].value
    button(at, "Run block-size sweep").click().run()
    assert "Without kernel timings" in at.success[0].value


def test_a_trace_with_an_arrival_a_billion_seconds_in_runs_to_the_end(at: AppTest) -> None:
    at.session_state["compare_test_upload"] = (
        "sparse.jsonl", b'{"arrival_s": 0, "prompt_tokens": 30, "output_tokens": 9}\n'
        b'{"arrival_s": 1e9, "prompt_tokens": 30, "output_tokens": 9}\n')
    at.run()
    button(at, "Run comparison").click().run()  # jumps over the idle time: no spinning
    assert not at.exception and not at.error
    assert (at.dataframe[0].value["steps to finish"] > 5 * 10**10).all()  # past 1e9 s
