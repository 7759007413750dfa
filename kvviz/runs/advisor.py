"""Block-size advisor: memory side (simulated tail waste, failures) against kernel time.

Pure Python (no numpy, no pandas, no torch): the kernel side's timings come from
kvviz/runs/kernelbench.py (`kvviz bench attention` in a subprocess, cached per machine).

Kernel timings are medians of repeated runs (`--rounds` sweeps of `--repeats` runs each, a
fixed torch thread count) with their 10th and 90th percentiles. A block size is *slower* than
the fastest only when its median is more than `kernel_tolerance` above the fastest median AND
its p10 lies above the fastest block's p90: a difference inside the noise never decides.

Rule: among block sizes that are not slower and whose tail waste share stays at or under
`waste_limit`, pick the largest (shortest block tables: fewer entries for the kernel and the
scheduler to walk; the waste limit already bounds what larger blocks cost in memory). If none
meets both, the waste limit wins: the fastest block under it. If no block is under it, the
least wasteful of the fast blocks. Without kernel timings: the largest block under the waste
limit. The reason names the device the timings came from.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple

from kvviz.runs.kernelbench import KernelPoint

BLOCK_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
CPU_TIMINGS = ("On the CPU they time kvviz's numba decode kernel, which reads every block "
               "where it lies through the block table, each K/V byte once (no gathered copy): "
               "block sizes differ by the indirection alone, small blocks paying for rows "
               "scattered over the pool.")
NOISY_SPREAD = 0.25  # (p90 - p10) / median above this: the point is called noisy


class MemoryPoint(NamedTuple):
    block_size: int
    tail_waste_share: float  # of capacity, mean over memory-pressure steps (else all steps)
    internal_share: float
    admit_failures: int  # CAPACITY + FRAGMENTATION + POLICY
    preemptions: int
    steps: int
    prefix_hit_rate: float = 0.0  # prompt tokens served from the prefix cache (prefix lanes)


class Advice(NamedTuple):
    block_size: int | None
    reason: str  # one sentence
    candidates: tuple[int, ...]  # block sizes that met both limits


def sweep_labels(block_sizes: Iterable[int] = BLOCK_SIZES, prefix: bool = False) -> list[str]:
    """Lane labels for a memory sweep, e.g. ['paged:1', 'paged:2', ...]."""
    return [f"paged:{bs}" + (":prefix" if prefix else "") for bs in block_sizes]


def memory_point(summary: dict) -> MemoryPoint:
    """Read one lane summary of kvviz.engine.Simulation.run."""
    pressure = summary.get("pressure_step_shares")  # None: never under memory pressure
    tail = summary["tail_waste_share"] if pressure is None else pressure["tail_waste"]
    internal = summary["internal_share"] if pressure is None else pressure["internal"]
    return MemoryPoint(int(summary["block_size"]), float(tail), float(internal),
                       int(sum(summary["admit_failures"].values())),
                       int(summary["preemptions"]), int(summary["steps"]),
                       float(summary.get("prefix_hit_rate", 0.0)))


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _noise_note(ker: dict[int, KernelPoint]) -> str:
    noisy = [b for b in sorted(ker) if ker[b].spread > NOISY_SPREAD]
    if not noisy:
        return ""
    return (f" Timings of block{'s' if len(noisy) > 1 else ''} "
            f"{', '.join(map(str, noisy))} are noisy (p10-p90 spread over "
            f"{_pct(NOISY_SPREAD)} of the median): measure again on a quiet machine.")


def recommend(memory: Sequence[MemoryPoint], kernel: Sequence[KernelPoint] | None = None,
              kernel_tolerance: float = 0.10, waste_limit: float = 0.05,
              source: str = "") -> Advice:
    """A block size and the reason. Kernel data may be missing or partial; `source` names
    where the timings came from (device, threads, runs) and ends the reason."""
    if kernel_tolerance < 0 or waste_limit < 0:
        raise ValueError("kernel_tolerance and waste_limit must be >= 0")
    mem = {m.block_size: m for m in memory}
    if not mem:
        return Advice(None, "No memory sweep yet: nothing to recommend.", ())
    ker = {k.block_size: k for k in kernel or () if k.block_size in mem}
    lean = sorted(bs for bs, m in mem.items() if m.tail_waste_share <= waste_limit)
    if not ker:
        if not lean:
            bs = min(mem, key=lambda b: (mem[b].tail_waste_share, b))
            return Advice(bs, f"Without kernel timings, and with no block size under "
                          f"{_pct(waste_limit)} tail waste, block {bs} wastes least "
                          f"({_pct(mem[bs].tail_waste_share)}).", ())
        bs = lean[-1]
        return Advice(bs, f"Without kernel timings: block {bs} is the largest (shortest block "
                      f"tables) whose tail waste stays under {_pct(waste_limit)} "
                      f"({_pct(mem[bs].tail_waste_share)}).", tuple(lean))
    best = min(ker, key=lambda b: (ker[b].paged_ms, b))
    best_ms = ker[best].paged_ms

    def slower(b: int) -> bool:
        return (ker[b].paged_ms > best_ms * (1 + kernel_tolerance)
                and ker[b].low > ker[best].high)

    fast = sorted(b for b in ker if not slower(b))
    both = tuple(b for b in fast if b in lean)
    tail = _noise_note(ker) + (f" Kernel timings from {source}." if source else "") + (
        " " + CPU_TIMINGS if source.startswith("cpu") else "")
    if both:
        bs = both[-1]
        m = mem[bs]
        k = ker[bs]
        return Advice(bs, f"Block {bs} is the largest block (shortest block tables) whose "
                      f"tail waste stays under {_pct(waste_limit)} "
                      f"({_pct(m.tail_waste_share)}; {m.preemptions} preemptions, "
                      f"{m.admit_failures} admission failures) and whose decode-attention "
                      f"time ({k.paged_ms:.3g} ms, p10-p90 {k.low:.3g}-{k.high:.3g}) is not "
                      f"slower than the best ({best_ms:.3g} ms at block {best}) by more than "
                      f"{_pct(kernel_tolerance)} and the noise; blocks "
                      f"{', '.join(map(str, both))} all qualify." + tail, both)
    lean_timed = [b for b in lean if b in ker]
    if lean_timed:
        bs = min(lean_timed, key=lambda b: (ker[b].paged_ms, b))
        slow = ker[bs].paged_ms / best_ms - 1
        return Advice(bs, f"Every block size under {_pct(waste_limit)} tail waste has a kernel "
                      f"time more than {_pct(kernel_tolerance)} (and the noise) above the best "
                      f"({best_ms:.3g} ms at block {best}); block {bs} is the fastest of those "
                      f"({ker[bs].paged_ms:.3g} ms, {_pct(slow)} slower; tail waste "
                      f"{_pct(mem[bs].tail_waste_share)})." + tail, ())
    bs = min(fast, key=lambda b: (mem[b].tail_waste_share, b))
    return Advice(bs, f"No block size stays under {_pct(waste_limit)} tail waste; among the "
                  f"blocks not slower than the fastest kernel, block {bs} wastes least "
                  f"({_pct(mem[bs].tail_waste_share)})." + tail, ())
