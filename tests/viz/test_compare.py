"""Compare builders: figure data equals the simulation's summaries."""
from __future__ import annotations

import numpy as np
import pytest

from kvviz.core.config import CacheConfig, EngineConfig, LaneSpec, WorkloadConfig
from kvviz.core.workload import generate
from kvviz.engine import Simulation
from kvviz.runs.advisor import Advice, KernelPoint, MemoryPoint
from kvviz.viz import compare as vc

LANES = ("contiguous:first-fit:max", "contiguous:best-fit:pow2", "paged:16")
STEP_MS = EngineConfig().step_ms


@pytest.fixture(scope="module")
def summaries() -> list[dict]:
    w = generate(WorkloadConfig("sharegpt-like", num_requests=150, rate=30.0, seed=2))
    sim = Simulation(w, [LaneSpec.parse(x) for x in LANES], CacheConfig(capacity_tokens=8192))
    return sim.run()


def test_summary_frame_has_one_row_per_lane(summaries) -> None:
    df = vc.summary_frame(summaries, STEP_MS)
    assert df["lane"].tolist() == list(LANES)
    s = summaries[2]
    row = df.iloc[2]
    assert row["tokens_per_sim_s"] == pytest.approx(
        s["tokens_generated"] / (s["steps"] * STEP_MS / 1000))
    assert row["fragmentation"] == s["admit_failures"]["fragmentation"]


def test_stacked_share_bars_are_all_steps_then_pressure_averages_summing_to_one(
        summaries) -> None:
    fig = vc.shares_figure(vc.summary_frame(summaries, STEP_MS))
    assert fig.layout.barmode == "stack"
    assert [t.name for t in fig.data] == [label for _, label in vc.SHARES]
    stack = np.vstack([np.asarray(t.x, np.float64) for t in fig.data])  # [shares, 2 * lanes]
    labels = list(fig.data[0].y)
    for i, s in enumerate(summaries):
        pressure = s["pressure_step_shares"]
        assert stack[:, 2 * i] == pytest.approx([s[k] for k, _ in vc.SHARES])
        assert stack[:, 2 * i + 1] == pytest.approx([pressure[k.removesuffix("_share")]
                                                     for k, _ in vc.SHARES])
        n = s["pressure_steps"]
        assert labels[2 * i] == f"{s['lane']} · all {s['steps']} steps"
        assert labels[2 * i + 1] == (f"{s['lane']} · memory pressure: {n} steps "
                                     f"({n / s['steps']:.1%})")
    assert stack.sum(axis=0) == pytest.approx(np.ones(2 * len(LANES)), abs=1e-6)
    assert all(isinstance(t.x, np.ndarray) for t in fig.data)


def test_a_lane_never_under_memory_pressure_gets_no_pressure_bar_and_says_so() -> None:
    w = generate(WorkloadConfig("alpaca-like", num_requests=20, rate=5.0, seed=1))
    (s,) = Simulation(w, [LaneSpec.parse("paged:16")],
                      CacheConfig(capacity_tokens=1 << 16)).run()
    assert s["pressure_steps"] == 0
    fig = vc.shares_figure(vc.summary_frame([s], STEP_MS))
    assert list(fig.data[0].y) == ["paged:16 · all " f"{s['steps']} steps",
                                   "paged:16 · never under memory pressure"]
    assert all(np.isnan(np.asarray(t.x)[1]) for t in fig.data)
    t = vc.display_table(vc.summary_frame([s], STEP_MS))
    assert t["memory-pressure steps"].iloc[0] == 0
    assert np.isnan(t["used % (memory pressure)"].iloc[0])


def test_failure_bars_are_the_counts_by_class(summaries) -> None:
    fig = vc.failures_figure(vc.summary_frame(summaries, STEP_MS))
    bars = {t.name: np.asarray(t.x) for t in fig.data if t.type == "bar"}
    assert list(bars) == ["CAPACITY", "FRAGMENTATION", "POLICY"]
    for i, s in enumerate(summaries):
        for cls, counts in bars.items():
            assert counts[i] == s["admit_failures"][cls.lower()]
    pre = next(t for t in fig.data if t.name == "preemptions")
    assert np.asarray(pre.x).tolist() == [s["preemptions"] for s in summaries]


def test_throughput_bars_and_steps_text(summaries) -> None:
    df = vc.summary_frame(summaries, STEP_MS)
    bar = vc.throughput_figure(df).data[0]
    assert np.asarray(bar.x) == pytest.approx(df["tokens_per_sim_s"].to_numpy())
    assert f"{summaries[0]['steps']} steps" in str(bar.text[0])


def test_display_table_is_in_percent(summaries) -> None:
    t = vc.display_table(vc.summary_frame(summaries, STEP_MS))
    s = summaries[0]
    assert t["used % (memory pressure)"].iloc[0] == pytest.approx(
        round(100 * s["pressure_step_shares"]["used"], 1))
    assert t["used % (all steps)"].iloc[0] == pytest.approx(round(100 * s["used_share"], 1))
    assert t["memory-pressure steps"].iloc[0] == s["pressure_steps"]
    assert {"fragmentation failures", "preemptions", "steps to finish"} <= set(t.columns)


def test_every_lane_option_parses() -> None:
    opts = vc.lane_options()
    assert [LaneSpec.parse(o).label for o in opts] == opts
    assert set(vc.DEFAULT_LANES) <= set(opts)
    assert "paged:256:prefix" in opts and "contiguous:buddy:exact" in opts


def test_advisor_figure_rows_and_highlight() -> None:
    memory = [MemoryPoint(b, b / 1000, 0.0, 3, 1, 10) for b in (1, 4, 16, 64)]
    kernel = [KernelPoint(b, 10 / b, 1.0) for b in (1, 4, 16, 64)]
    fig = vc.advisor_figure(memory, kernel, Advice(16, "why", (16,)))
    assert np.asarray(fig.data[0].y) == pytest.approx([0.001, 0.004, 0.016, 0.064])
    assert len(fig.layout.shapes) == 3  # the recommendation marked in every row
    assert fig.layout.shapes[0].x0 == pytest.approx(1.5)
    assert len(vc.advisor_figure(memory, None, None).data) == 3  # no kernel row


def test_failure_axis_never_shows_negative_counts(summaries) -> None:
    assert vc.failures_figure(vc.summary_frame(summaries, STEP_MS)).layout.xaxis.rangemode \
        == "nonnegative"


def test_a_noisy_kernel_bar_does_not_flatten_the_medians() -> None:
    """One p90 of 5,000 ms beside medians of ~10 ms: the kernel axis stops at 3x the largest
    line and says where the bars were cut; quiet timings keep the axis that fits them."""
    memory = [MemoryPoint(b, b / 1000, 0.0, 3, 1, 10) for b in (1, 4, 16)]
    noisy = [KernelPoint(1, 12.0, 9.0, 10.0, 14.0), KernelPoint(4, 10.0, 9.0, 8.0, 5000.0),
             KernelPoint(16, 9.5, 9.0, 9.0, 10.0)]
    fig = vc.advisor_figure(memory, noisy, None)
    assert tuple(fig.layout.yaxis3.range) == pytest.approx((0, 36.0))
    assert any("bars cut at 36.00 ms" in a.text for a in fig.layout.annotations)
    quiet = [k._replace(paged_p90=k.paged_ms + 1) for k in noisy]
    assert vc.kernel_axis_top(quiet) is None
    assert vc.advisor_figure(memory, quiet, None).layout.yaxis3.range is None
