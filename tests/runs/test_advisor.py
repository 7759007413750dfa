"""Block-size advisor: the rule on hand-made numbers, and reading lane summaries."""
from __future__ import annotations

import subprocess
import sys

import pytest

from kvviz.runs import advisor
from kvviz.runs.advisor import Advice, MemoryPoint
from kvviz.runs.kernelbench import KernelPoint


def mem(waste: dict[int, float]) -> list[MemoryPoint]:
    return [MemoryPoint(bs, w, 0.0, 10, 5, 100) for bs, w in waste.items()]


def ker(ms: dict[int, float]) -> list[KernelPoint]:
    return [KernelPoint(bs, t, 1.0) for bs, t in ms.items()]


WASTE = {1: 0.0, 4: 0.005, 16: 0.02, 64: 0.08, 256: 0.30}
KERNEL = {1: 10.0, 4: 3.0, 16: 1.05, 64: 1.0, 256: 1.0}


def test_largest_block_within_both_limits() -> None:
    a = advisor.recommend(mem(WASTE), ker(KERNEL), kernel_tolerance=0.10, waste_limit=0.05)
    assert a.block_size == 16
    assert a.candidates == (16,)
    assert "Block 16" in a.reason and "10.0%" in a.reason and "5.0%" in a.reason


def test_a_looser_kernel_tolerance_admits_more_blocks_and_keeps_the_largest() -> None:
    a = advisor.recommend(mem(WASTE), ker(KERNEL), kernel_tolerance=2.0, waste_limit=0.05)
    assert a.block_size == 16 and a.candidates == (4, 16)


# The CPU curve: ~15 ms everywhere but spikes to ~200 ms at blocks 8-16.
SWEEP_WASTE = {1: 0.0, 2: 0.001, 4: 0.003, 8: 0.006, 16: 0.012, 32: 0.025, 64: 0.05,
               128: 0.10, 256: 0.20}


def spiky(p10_of_spike: float) -> list[KernelPoint]:
    flat = {bs: KernelPoint(bs, 15.0 + 0.01 * i, 10.0, 14.0, 17.0)
            for i, bs in enumerate(SWEEP_WASTE)}
    for bs in (8, 16):
        flat[bs] = KernelPoint(bs, 200.0, 10.0, p10_of_spike, 260.0)
    return list(flat.values())


@pytest.mark.parametrize("p10_of_spike", [14.5, 190.0])  # noise, or a steady spike
def test_a_spiky_cpu_curve_never_recommends_block_1(p10_of_spike) -> None:
    a = advisor.recommend(mem(SWEEP_WASTE), spiky(p10_of_spike), 0.10, 0.05,
                          source="cpu (x86_64, 4 torch threads, median of 60 runs)")
    assert a.block_size not in (None, 1)
    assert a.block_size == 64  # the largest block under the waste limit: the kernel is flat
    assert "Kernel timings from cpu (x86_64, 4 torch threads" in a.reason
    assert a.reason.endswith(advisor.CPU_TIMINGS)  # what CPU timings measure: no copy
    assert (8 in a.candidates) == (p10_of_spike < 17.0)  # inside the noise: not "slower"
    assert "noisy" in a.reason or p10_of_spike > 100


def test_a_difference_inside_the_noise_does_not_decide() -> None:
    """Block 32 looks 30% slower by its median, but its p10 is under the best's p90."""
    kernel = [KernelPoint(16, 10.0, 5.0, 8.0, 14.0), KernelPoint(32, 13.0, 5.0, 12.0, 16.0)]
    a = advisor.recommend(mem({16: 0.01, 32: 0.02}), kernel, 0.10, 0.05)
    assert a.block_size == 32 and a.candidates == (16, 32)
    steady = [KernelPoint(16, 10.0, 5.0, 9.8, 10.2), KernelPoint(32, 13.0, 5.0, 12.8, 13.2)]
    assert advisor.recommend(mem({16: 0.01, 32: 0.02}), steady, 0.10, 0.05).block_size == 16


def test_waste_limit_wins_when_no_block_meets_both() -> None:
    a = advisor.recommend(mem(WASTE), ker(KERNEL), kernel_tolerance=0.01, waste_limit=0.05)
    assert a.block_size == 16  # fastest of the blocks under 5% waste (1, 4, 16)
    assert a.candidates == ()
    assert "fastest of those" in a.reason


def test_no_block_under_the_waste_limit_takes_least_wasteful_fast_block() -> None:
    a = advisor.recommend(mem({64: 0.08, 256: 0.30}), ker({64: 1.0, 256: 1.0}),
                          waste_limit=0.01)
    assert a.block_size == 64 and a.candidates == ()


def test_without_kernel_timings_largest_block_under_the_limit() -> None:
    a = advisor.recommend(mem(WASTE), None, waste_limit=0.05)
    assert a.block_size == 16 and a.candidates == (1, 4, 16)
    assert "Without kernel timings" in a.reason


def test_kernel_points_for_unswept_sizes_are_ignored() -> None:
    a = advisor.recommend(mem({16: 0.01}), ker({16: 5.0, 32: 1.0}))
    assert a.block_size == 16


def test_nothing_to_recommend_without_memory_side() -> None:
    assert advisor.recommend([], ker(KERNEL)) == Advice(None, advisor.recommend([]).reason, ())
    with pytest.raises(ValueError):
        advisor.recommend(mem(WASTE), None, waste_limit=-1)


def test_memory_point_reads_a_lane_summary() -> None:
    s = {"block_size": 16, "tail_waste_share": 0.02, "internal_share": 0.01,
         "admit_failures": {"capacity": 3, "fragmentation": 0, "policy": 4},
         "preemptions": 2, "steps": 50}
    assert advisor.memory_point(s) == MemoryPoint(16, 0.02, 0.01, 7, 2, 50)


def test_advisor_imports_neither_numpy_nor_pandas() -> None:
    code = ("import sys, kvviz.runs.advisor, kvviz.runs.kernelbench; "
            "sys.exit(int('numpy' in sys.modules or 'pandas' in sys.modules))")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
