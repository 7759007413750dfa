"""`kvviz collect` end to end in sim mode, and bad input that must exit 2 with no file."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kvviz.store.reader import RunReader
from tests.collectors.conftest import FAST_SIM, collect


@pytest.fixture(scope="module")
def sim_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("run") / "sim.db"
    assert collect(*FAST_SIM, "--out", str(out), "--rate", "inf", "--requests", "150",
                   "--duration", "20", "--lane", "contiguous:first-fit:max",
                   "--lane", "paged:16") == 0
    return out


def test_run_finishes_with_both_lanes(sim_run: Path) -> None:
    r = RunReader(sim_run)
    assert r.status == "finished" and r.status_message == "workload exhausted"
    assert r.lanes() == ["contiguous:first-fit:max", "paged:16"]
    last = r.samples().groupby("lane").tail(1).set_index("lane")
    assert (last.running == 0).all() and (last.waiting == 0).all()
    assert last.loc["contiguous:first-fit:max", "admit_failures_capacity"] > 0
    dm = r.device_memory()
    assert dm.process_rss_bytes.gt(0).all() and (dm.kv_pool_bytes == 0).all()


def test_events_in_order_and_complete(sim_run: Path) -> None:
    r = RunReader(sim_run)
    ev = r.events()
    assert ev.t.is_monotonic_increasing or (ev.groupby("lane").t.diff().fillna(0) >= 0).all()
    for lane, grp in ev.groupby("lane"):
        life = grp[grp.kind.isin(["admitted", "preempted", "finished"])]
        last = life.groupby("seq_id").kind.last()
        assert (last == "finished").all(), f"{lane}: {last[last != 'finished'].head()}"
        assert set(last.index) == set(range(150))  # every request admitted and finished
        assert len(grp[grp.kind == "finished"]) == 150


def test_events_complete_while_stopped_midway(tmp_path: Path) -> None:
    out = tmp_path / "mid.db"
    assert collect(*FAST_SIM, "--out", str(out), "--rate", "inf", "--requests", "2000",
                   "--duration", "1.5") == 0
    r = RunReader(out)
    bm_owners = {}
    for lane in r.lanes():
        bm, _ = r.latest_blockmap(lane)
        bm_owners[lane] = set(np.unique(bm.owner[bm.owner >= 0]).tolist())
    for lane, grp in r.events().groupby("lane"):
        life = grp[grp.kind.isin(["admitted", "preempted", "finished"])]
        last = life.groupby("seq_id").kind.last()
        assert set(last[last == "admitted"].index) == bm_owners[lane]  # still running
        running = int(r.samples(lane).running.iloc[-1])
        assert running == len(bm_owners[lane])


def test_a_step_bound_ends_the_run_at_that_step_however_fast_the_machine(tmp_path: Path) -> None:
    out = tmp_path / "steps.db"
    assert collect(*FAST_SIM, "--out", str(out), "--rate", "inf", "--requests", "2000",
                   "--max-steps", "37", "--lane", "paged:16", "--lane", "paged:32") == 0
    r = RunReader(out)
    assert r.status == "finished" and r.status_message == "37 steps reached"
    assert r.meta["collector"]["max_steps"] == 37
    last = r.samples().groupby("lane").tail(1)
    assert (last.step == 37).all() and (last.waiting > 0).all()  # stopped midway


def test_the_scheduler_knobs_reach_the_engine_under_vllms_names(tmp_path: Path) -> None:
    """--watermark turns the head away with POLICY where the same stream without it runs into
    memory (CAPACITY, preemptions); the budget and chunked prefill land in the run's engine
    (a prompt waiting for a step with budget for all of it is POLICY too)."""
    runs = {}
    for name, flags in {"plain": ["--watermark", "0"], "mark": ["--watermark", "0.3"],
                        "budget": ["--max-num-batched-tokens", "2048",
                                   "--no-enable-chunked-prefill"]}.items():
        out = tmp_path / f"{name}.db"
        assert collect(*FAST_SIM, "--out", str(out), "--rate", "inf", "--requests", "300",
                       "--max-steps", "400", "--lane", "paged:16", *flags) == 0
        r = RunReader(out)
        runs[name] = (r.meta["engine"], r.samples().iloc[-1])
    plain, mark, budget = runs["plain"], runs["mark"], runs["budget"]
    assert plain[0]["watermark"] == 0.0 and mark[0]["watermark"] == 0.3
    assert (budget[0]["max_batched_tokens"], budget[0]["enable_chunked_prefill"]) == (2048, False)
    assert (plain[0]["max_batched_tokens"], plain[0]["enable_chunked_prefill"]) == (8192, True)
    assert plain[1].admit_failures_policy == 0 and plain[1].admit_failures_capacity > 0
    assert mark[1].admit_failures_policy > 0 and mark[1].preemptions < plain[1].preemptions
    assert budget[1].admit_failures_policy > 0


def test_loop_keeps_ids_unique(tmp_path: Path) -> None:
    out = tmp_path / "loop.db"
    assert collect(*FAST_SIM, "--out", str(out), "--rate", "inf", "--requests", "20",
                   "--loop", "--duration", "2") == 0
    ev = RunReader(out).events(kinds=["finished"])
    per_lane = ev.groupby("lane").seq_id
    # ids 20.. belong to the second pass over the 20 requests (the first is 0..19)
    assert (per_lane.nunique() == per_lane.size()).all() and ev.seq_id.max() >= 20


@pytest.mark.parametrize(("argv", "words"), [
    (["--workload", "nope"], "--workload: expected one of"),
    (["--model", "gpt-9"], "--model: expected one of"),
    (["--lane", "bogus:1"], "allocator must be"),
    (["--hz", "0"], "--hz"),
    (["--max-steps", "0"], "--max-steps"),
    (["--arrival", "sometimes"], "arrival"),
    (["--capacity-tokens", "4", "--lane", "paged:16"], "--capacity-tokens: lane paged:16: 4"),
    (["--watermark", "1"], "--watermark: must be in [0, 1)"),
    (["--max-num-batched-tokens", "0"], "--max-num-batched-tokens: must be in"),
    (["--no-enable-chunked-prefill", "--max-num-batched-tokens", "1000"],
     "--max-num-batched-tokens: 1000 is below max_seq_len 2048"),
])
def test_bad_flags_exit_2_without_a_file(tmp_path: Path, capsys, argv, words) -> None:
    out = tmp_path / "bad.db"
    assert collect(*FAST_SIM, "--out", str(out), *argv) == 2
    assert words in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_unknown_flag_and_unwritable_out(tmp_path: Path, capsys) -> None:
    assert collect("--no-such-flag") == 2
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert collect(*FAST_SIM, "--out", str(blocker / "run.db")) == 2
    assert "cannot create directory" in capsys.readouterr().err
    (tmp_path / "taken.db").write_text("x")
    assert collect(*FAST_SIM, "--out", str(tmp_path / "taken.db")) == 2
    assert "already exists" in capsys.readouterr().err


def test_bad_trace_exits_2(tmp_path: Path, capsys) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,10,5\n0.5,ten,5\n")
    out = tmp_path / "trace.db"
    assert collect(*FAST_SIM, "--out", str(out), "--trace", str(trace)) == 2
    assert "line 3" in capsys.readouterr().err and not out.exists()


def test_trace_replay_and_hooks(tmp_path: Path) -> None:
    from collectors import launch
    from kvviz.commands.cli import build_parser
    from kvviz.settings.flags import settings_of

    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,10,5\n0.1,20,8\n")
    args = build_parser("collect").parse_args(
        ["collect", *FAST_SIM, "--out", str(tmp_path / "tr.db"), "--trace", str(trace)])
    settings = settings_of(args)
    collector = launch.build(settings)
    seen: list[dict] = []
    collector.hooks.append(seen.append)
    assert collector.run() == "finished"
    assert seen and {"sample_id", "t", "lane", "used_tokens", "running"} <= set(seen[0])
    finished = RunReader(tmp_path / "tr.db").events(kinds=["finished"])
    assert len(finished) == 2 * len(settings.lanes)  # both requests in every lane


def test_pacing_cap_holds_when_sampling_is_faster_than_stepping(tmp_path: Path) -> None:
    # --hz above --steps-per-s: the sampling sleeps must not let the engine step early.
    out = tmp_path / "paced.db"
    assert collect("--mode", "sim", "--quiet", "--steps-per-s", "10", "--hz", "25",
                   "--duration", "1.5", "--out", str(out), "--rate", "inf") == 0
    r = RunReader(out)
    s = r.samples()
    assert s.step.max() <= 10 * s.t.max() + 1  # one step at t=0, then one per 0.1 s
    assert s.step.max() >= 5  # and it does step
    assert s.groupby("lane").size().min() >= 20  # while sampling at 25 Hz
