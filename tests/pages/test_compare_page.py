"""Compare page under AppTest: lanes run, the advisor recommends, bad traces show st.error."""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from kvviz.runs import advisor, kernelbench
from tests.pages.apptest_fixtures import FakeUploads, framed

PAGE = str(Path(__file__).resolve().parents[2] / "pages" / "compare.py")


@pytest.fixture
def at(tmp_path, monkeypatch) -> AppTest:
    monkeypatch.setenv("KVVIZ_CACHE_DIR", str(tmp_path))  # never the user's bench cache
    app = framed(AppTest.from_file(PAGE, default_timeout=120))
    app.run()
    assert not app.exception
    next(n for n in app.number_input if n.label == "Requests").set_value(200)
    app.run()
    return app


def trace(app: AppTest, uploads: FakeUploads, name: str, data: bytes) -> None:
    """The user picks "Trace file" and uploads `name`."""
    uploads.put("Trace, as downloaded", name, data)
    next(r for r in app.radio if r.label == "Requests from").set_value("Trace file")


def failing_bench(monkeypatch) -> None:
    """The kernel bench the advisor would run exits with status 3."""
    cmd = [sys.executable, "-c", "import sys; sys.exit(3)"]
    monkeypatch.setattr(kernelbench, "bench_command", lambda device: cmd)


def button(app: AppTest, label: str):
    return next(b for b in app.button if b.label == label)


def test_loads_with_tabs_and_no_results_yet(at: AppTest) -> None:
    assert at.title[0].value == "Compare allocators"
    assert [t.label for t in at.tabs] == ["Allocators", "Block-size advisor", "What if?"]
    assert "200 requests" in at.caption[0].value
    assert not at.get("plotly_chart")


def test_the_scheduler_limits_reach_every_lane_and_a_bad_pair_is_one_error(at: AppTest) -> None:
    assert "batch limit 256, 8,192 tokens per step, chunked prefill on, watermark 0" in (
        at.caption[0].value)  # vLLM's defaults
    button(at, "Run comparison").click().run()
    before = at.dataframe[0].value.set_index("lane")
    next(n for n in at.number_input if n.label.startswith("Batch limit")).set_value(4)
    at.run()
    assert "batch limit 4," in at.caption[0].value
    after = at.dataframe[0].value.set_index("lane")
    assert (after["mean batch"] <= 4).all() and (before["mean batch"] > 4).any()
    next(c for c in at.checkbox if c.label == "Chunked prefill").set_value(False)
    next(n for n in at.number_input if n.label.startswith("Token budget")).set_value(1000)
    at.run()
    assert not at.exception
    shown = [re.sub(r"\\(.)", r"\1", e.value) for e in at.error]
    assert any("token budget per step (max_num_batched_tokens): 1000 is below max_seq_len"
               in e for e in shown), shown


def test_run_comparison_draws_figures_and_table(at: AppTest) -> None:
    lanes = at.multiselect[0].value
    button(at, "Run comparison").click().run()
    assert not at.exception
    assert len(at.get("plotly_chart")) == 3
    assert at.dataframe[0].value["lane"].tolist() == lanes
    assert any("SOSP'23" in c.value for c in at.caption)
    at.run()  # a rerun hits the cache (and replays nothing stale)
    assert not at.exception and len(at.get("plotly_chart")) == 3


def test_bad_trace_shows_error_naming_line_and_field(at: AppTest, uploads) -> None:
    trace(at, uploads,
        "bad.csv", b"arrival_s,prompt_tokens,output_tokens\n0,5,5\n1,x,5\n")
    at.run()
    assert not at.exception
    msg = re.sub(r"\\(.)", r"\1", at.error[0].value)  # shown as plain text: escaped Markdown
    assert "bad.csv: line 3: column 'prompt_tokens': not a valid value" in msg
    assert not at.tabs  # nothing else runs on a bad trace
    # the page's own control, not the command line's flag
    assert '"Skip unusable rows" in the sidebar' in msg and "--" not in msg


def test_good_trace_is_used(at: AppTest, uploads) -> None:
    trace(at, uploads,
        "ok.jsonl", b'{"arrival_s": 0, "prompt_tokens": 30, "output_tokens": 9}\n' * 5)
    at.run()
    assert not at.exception and not at.error
    assert "5 requests" in at.caption[0].value


def test_a_mooncake_upload_shows_what_was_detected_and_prefix_hits(at: AppTest,
                                                                  uploads) -> None:
    rows = [{"timestamp": 100 * i, "input_length": 1100, "output_length": 8,
             "hash_ids": [1, 2, 100 + i]} for i in range(6)]
    trace(at, uploads,
        "moon.jsonl", "".join(json.dumps(r) + "\n" for r in rows).encode())
    at.run()
    assert not at.exception and not at.error
    facts = dict(at.dataframe[0].value.itertuples(index=False))
    assert facts["format"] == "mooncake" and facts["rows read / kept"] == "6 / 6"
    assert facts["prefix reuse share"].startswith("77.6%")  # 5 x 1024 of 6 x 1100 tokens
    at.multiselect[0].set_value(["paged:16:prefix", "paged:16"]).run()
    button(at, "Run comparison").click().run()
    assert not at.exception
    table = next(d.value for d in at.dataframe if "prefix hit %" in d.value)
    assert table["prefix hit %"].tolist() == [77.6, 0.0]


def test_skipping_unusable_rows_runs_and_counts_them(at: AppTest, uploads) -> None:
    trace(at, uploads,
        "bad.csv", b"arrival_s,prompt_tokens,output_tokens\n0,5,5\n1,x,5\n2,6,6\n")
    at.run()
    assert at.error
    next(c for c in at.checkbox if c.label.startswith("Skip unusable rows")).check().run()
    assert not at.exception and not at.error
    assert "1 bad" in at.warning[0].value and "2 requests" in at.caption[0].value


def test_the_advisor_sweeps_prefix_lanes_for_a_trace_with_hash_chains(at: AppTest, uploads,
                                                                      monkeypatch) -> None:
    rows = [{"timestamp": 100 * i, "input_length": 1100, "output_length": 4,
             "hash_ids": [1, 2, 100 + i]} for i in range(4)]
    trace(at, uploads,
        "moon.jsonl", "".join(json.dumps(r) + "\n" for r in rows).encode())
    failing_bench(monkeypatch)
    at.run()
    assert next(c for c in at.checkbox if c.label.startswith("Sweep with prefix")).value
    button(at, "Run block-size sweep").click().run()
    assert not at.exception
    rates = next(c.value for c in at.caption if c.value.startswith("Prefix hit rate"))
    assert "16: 70%" in rates and "256: 70%" in rates  # 3 x 1024 of 4 x 1100 prompt tokens


def test_failed_and_clipped_rows_are_shown(at: AppTest, uploads) -> None:
    trace(at, uploads,
        "b.csv", b"Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                 b"0,ChatGPT,50,0,50,Conversation log\n1,ChatGPT,40,9,49,Conversation log\n")
    at.run()
    assert not at.exception and not at.error
    assert "1 failed" in at.warning[0].value


def test_advisor_with_cached_kernel_times_recommends(at: AppTest, tmp_path) -> None:
    cmd = kernelbench.bench_command("cpu")
    key = kernelbench.cache_key(cmd)
    points = [[b, 1.0 if b == 16 else 4.0, 1.0] for b in advisor.BLOCK_SIZES]
    kernelbench.cache_path(key, tmp_path).write_text(
        json.dumps({"key": key, "measured_at": "then", "points": points}), encoding="utf-8")
    at.run()
    assert button(at, "Measure kernel time again")
    button(at, "Run block-size sweep").click().run()
    assert not at.exception
    assert "Recommended block size: 16." in at.success[0].value
    assert len(at.get("plotly_chart")) == 1


def test_a_spiky_cpu_curve_in_the_cache_does_not_recommend_block_1(at: AppTest,
                                                                    tmp_path) -> None:
    """The issue's curve: ~15 ms everywhere, ~200 ms at blocks 8-16, spread named."""
    cmd = kernelbench.bench_command("cpu")
    key = kernelbench.cache_key(cmd)
    points = [[b, 200.0 if b in (8, 16) else 15.0, 10.0, 14.0 if b in (8, 16) else 14.5,
               260.0 if b in (8, 16) else 16.0] for b in advisor.BLOCK_SIZES]
    kernelbench.cache_path(key, tmp_path).write_text(
        json.dumps({"key": key, "measured_at": "then", "points": points}), encoding="utf-8")
    at.run()
    assert any(f"{kernelbench.bench_threads()} torch threads" in c.value and "cpu (" in c.value
               for c in at.caption)
    button(at, "Run block-size sweep").click().run()
    assert not at.exception
    won = at.success[0].value
    assert "Recommended block size: 1." not in won and "Kernel timings from cpu (" in won
    assert "noisy" in won


def test_failures_are_shown_with_what_explains_them(at: AppTest) -> None:
    button(at, "Run comparison").click().run()
    assert not at.exception
    out = next(d.value for d in at.dataframe if "mean batch" in d.value)
    assert list(out.columns) == ["lane", "admitted", "finished", "mean batch", "tokens / s",
                                 "preemptions", "CAPACITY", "FRAGMENTATION", "POLICY"]
    assert (out["admitted"] == out["finished"] + out["preemptions"]).all()
    assert out["CAPACITY"].sum() > 0 and out["preemptions"].sum() > 0
    why = next(re.sub(r"\\(.)", r"\1", m.value) for m in at.markdown
               if m.value.startswith("- "))
    lines = why.splitlines()
    assert len(lines) == len(out)  # one sentence per lane, naming the lane and its numbers
    for line, (_, row) in zip(lines, out.iterrows()):
        assert line.startswith(f"- {row['lane']} ran {row['mean batch']:.1f} requests")
        assert f"{row['tokens / s']:,.0f} tokens / simulated s" in line


def test_failing_bench_warns_and_keeps_the_memory_side(at: AppTest, monkeypatch) -> None:
    failing_bench(monkeypatch)
    at.run()
    button(at, "Measure kernel time on this machine").click().run()
    assert not at.exception
    assert "status 3" in at.warning[0].value
    button(at, "Run block-size sweep").click().run()
    assert "Without kernel timings" in at.success[0].value


def test_a_trace_with_an_arrival_a_billion_seconds_in_runs_to_the_end(at: AppTest,
                                                                      uploads) -> None:
    trace(at, uploads,
        "sparse.jsonl", b'{"arrival_s": 0, "prompt_tokens": 30, "output_tokens": 9}\n'
        b'{"arrival_s": 1e9, "prompt_tokens": 30, "output_tokens": 9}\n')
    at.run()
    button(at, "Run comparison").click().run()  # jumps over the idle time: no spinning
    assert not at.exception and not at.error
    table = next(d.value for d in at.dataframe if "steps to finish" in d.value)
    assert (table["steps to finish"] > 5 * 10**10).all()  # past 1e9 s


def test_measuring_kernel_time_pauses_a_running_demo_collector_and_resumes_it():
    from types import SimpleNamespace

    from kvviz.runs.status import RUNNING
    from pages.compare_advisor import collector_paused

    class Coll:
        def __init__(self, state, paused):
            self.state, self.paused, self.calls = state, paused, []

        def status(self):
            return SimpleNamespace(state=self.state)

        def control(self):
            return SimpleNamespace(paused=self.paused)

        def set_paused(self, p):
            self.calls.append(p)
            self.paused = p

    running = Coll(RUNNING, False)
    with pytest.raises(RuntimeError), collector_paused(running):
        assert running.paused
        raise RuntimeError("the measurement failed")
    assert running.calls == [True, False] and not running.paused
    already = Coll(RUNNING, True)  # paused by the user: stays paused
    with collector_paused(already):
        pass
    assert already.calls == [] and already.paused
    stopped = Coll("stopped", False)
    with collector_paused(stopped):
        pass
    assert stopped.calls == []
