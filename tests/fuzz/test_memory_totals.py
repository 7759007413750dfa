"""Round 3, item 1: a run's memory is bounded by its total, checked before anything exists.

The issue's cases (20 x `--lane paged:1` at 16,777,216 slots, grown to 22.6 GB and killed by
the OOM killer; `--mode real --model llama-3-8b --capacity-tokens 1000000`, a torch
traceback) are run here small and fast: the refusal must come before any lane, pool or file
is made, so the fakes below fail the test if the collector or the simulation is ever built.
"""
from __future__ import annotations

import hypothesis.strategies as hs
import pytest
from hypothesis import given, settings

from kvviz.core.config import MODEL_PRESETS, LaneSpec
from kvviz.core.errors import KvvizError
from kvviz.settings import memory
from tests.fuzz.hostile import check_property, run_cli

TWENTY_PAGED_1 = [a for _ in range(20) for a in ("--lane", "paged:1")]


class Built(AssertionError):
    """The run got past its memory check: something was about to be allocated."""


def _never(*_a, **_kw):
    raise Built("a collector or simulation was built for a run that cannot fit")


@pytest.fixture
def nothing_built(monkeypatch):
    import collectors.engine_collector as ec
    import collectors.launch as launch
    import kvviz.commands.simulate as simulate

    monkeypatch.setattr(ec, "EngineCollector", _never)
    monkeypatch.setattr(launch, "EngineCollector", _never)
    monkeypatch.setattr(simulate, "Simulation", _never)
    monkeypatch.setattr(memory, "available_bytes", lambda: 16 << 30)  # a 16 GiB machine


def _one_error(cmd: str, argv: list[str], *words: str) -> str:
    res = run_cli(argv)
    check_property(cmd, argv, res)
    assert res.code == 2, (argv, res.err)
    line = res.err.strip()
    for w in words:
        assert w in line, line
    return line


def test_twenty_paged_1_lanes_at_the_largest_capacity_are_refused_before_any_lane(
        nothing_built, tmp_path):
    out = tmp_path / "run.db"
    argv = ["collect", "--mode", "sim", "--capacity-tokens", "16777216", *TWENTY_PAGED_1,
            "--out", str(out), "--duration", "15"]
    line = _one_error("collect", argv, "needs", "in total", "limit", "20 lanes")
    assert not out.exists()
    assert "51,200 MB" in line  # 20 x 16M blocks x 160 bytes, named


def test_real_llama_3_8b_pools_are_refused_before_torch_allocates(nothing_built, tmp_path):
    out = tmp_path / "run.db"
    argv = ["collect", "--mode", "real", "--model", "llama-3-8b", "--capacity-tokens",
            "1000000", "--lane", "paged:16", "--out", str(out), "--duration", "1"]
    line = _one_error("collect", argv, "K/V pools (llama-3-8b", "limit")
    assert f"{1_000_000 * 131072 / 2**20:,.0f} MB" in line
    assert not out.exists()


def test_an_explicit_budget_is_the_limit_and_named(nothing_built, tmp_path):
    argv = ["collect", "--mode", "sim", "--memory-budget-mb", "50", "--out",
            str(tmp_path / "r.db"), "--duration", "1"]
    _one_error("collect", argv, "--memory-budget-mb 50", "limit of 50 MB")


def test_simulate_refuses_requests_past_the_limit_before_generating_them(nothing_built,
                                                                          monkeypatch):
    import kvviz.commands.simulate as simulate

    monkeypatch.setattr(simulate, "generate", _never)
    argv = ["simulate", "--requests", "10000000", "--rate", "inf", "--memory-budget-mb", "1000"]
    _one_error("simulate", argv, "10000000 requests", "limit of 1,000 MB")


def test_simulate_counts_a_traces_rows_before_the_simulation(nothing_built, tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n"
                     + "".join(f"{i * 0.01},10,10\n" for i in range(5000)))
    argv = ["simulate", "--trace", str(trace), "--memory-budget-mb", "100"]
    _one_error("simulate", argv, "5000 requests", "limit of 100 MB")


LANES = hs.builds(lambda kind, bs: LaneSpec.parse(
    f"paged:{bs}" if kind else "contiguous:first-fit:max"), hs.booleans(),
    hs.sampled_from([1, 16, 256]))


@settings(max_examples=200, deadline=None)
@given(lanes=hs.lists(LANES, min_size=1, max_size=40), cap=hs.integers(256, 2**24),
       requests=hs.integers(1, 10_000_000), budget=hs.floats(1.0, 2.0**20),
       model=hs.sampled_from([None, *MODEL_PRESETS.values()]))
def test_the_total_fits_the_limit_or_is_one_error_naming_both(lanes, cap, requests, budget,
                                                              model):
    need = memory.need(lanes, cap, requests, model, "cpu")
    assert need.host == sum(b for _, b in need.parts)
    try:
        memory.check(need, budget, available=64 << 30)
    except KvvizError as exc:
        text = str(exc)
        assert need.host > min(budget * 2**20, 64 << 30)
        assert memory.mb(need.host) in text and "limit of" in text and "\n" not in text
    else:
        assert need.host <= budget * 2**20


def test_pools_on_cuda_are_checked_against_the_devices_free_memory():
    need = memory.need([LaneSpec.parse("paged:16")], 1_000_000, 10,
                       MODEL_PRESETS["llama-3-8b"], "cuda")
    assert need.device == 1_000_000 * 131072 and need.host < 200 << 20
    with pytest.raises(KvvizError, match="CUDA device"):
        memory.check(need, None, available=64 << 30, device_free=80 << 30)
    memory.check(need, None, available=64 << 30, device_free=200 << 30)


def _whatif_trace(tmp_path, rows: int = 200):
    trace = tmp_path / "node.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n"
                     + "".join(f"{i * 0.05},40,8\n" for i in range(rows)))
    return trace


def test_whatif_refuses_a_configuration_that_alone_does_not_fit_before_any_worker(
        nothing_built, tmp_path, monkeypatch):
    import kvviz.twin as twin

    monkeypatch.setattr(twin, "run_all", _never)
    argv = ["whatif", str(_whatif_trace(tmp_path)), "--block-size", "1", "--num-blocks",
            "16777217", "--memory-budget-mb", "1000"]
    line = _one_error("whatif", argv, "block metadata", "limit of 1,000 MB")
    assert f"{16777216 * memory.PAGED_BLOCK_BYTES / 2**20:,.0f} MB" in line


def test_whatif_runs_fewer_configurations_at_once_when_all_would_not_fit(tmp_path):
    """16 configurations of 2^20 one-slot blocks (160 MB of metadata each) under a 1,000 MB
    budget with 16 workers asked: a few at a time, said once; every configuration runs."""
    argv = ["whatif", str(_whatif_trace(tmp_path, 20)), "--block-size", "1", "--num-blocks",
            ",".join(str((1 << 20) - k) for k in range(16)), "--workers", "16",
            "--memory-budget-mb", "1000", "--json"]
    res = run_cli(argv)
    assert res.code == 0, res.err
    (note,) = [x for x in res.err.splitlines() if "at a time" in x]
    fit = int(note.split("running ")[1].split()[0])
    assert 1 <= fit < 16 and "limit of 1,000 MB" in note, note
    assert len(res.out.strip().splitlines()) == 1 + 17  # the head line, then each run
