"""Time-averaged shares over a span of a recording, from the engine's cumulative counters.

Each sample carries, per lane, running sums since the start (kvviz.engine.shares.Shares
.counters): steps, memory-pressure steps, and used / reserved / internal / free slot-steps over
all steps and over memory-pressure steps. The averages over the steps between two samples are
differences of the sums divided by steps * capacity: exact, whatever the sampling rate.
A memory-pressure step: the head-of-line request was refused for memory (CAPACITY or
FRAGMENTATION) or a sequence was preempted.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pandas as pd

SHARE_KEYS = ("used", "reserved", "internal", "free")
COLUMNS = ("share_steps", "pressure_steps",
           *(f"{k}_slot_steps" for k in SHARE_KEYS),
           *(f"{k}_slot_steps_pressure" for k in SHARE_KEYS))
NEVER = "never under memory pressure"


class SpanShares(NamedTuple):
    steps: int
    pressure_steps: int
    all_steps: dict[str, float]  # share of capacity per key, mean over all steps of the span
    pressure: dict[str, float] | None  # mean over memory-pressure steps; None when there were none


def span_shares(samples: pd.DataFrame, lane: str) -> SpanShares | None:
    """Shares over the steps between the lane's first and last sample in `samples` (since
    the start when there is one sample). None when the recording lacks the counters (older
    recordings) or no step passed."""
    df = samples[samples["lane"] == lane] if "lane" in samples else samples
    if df.empty or any(c not in df for c in COLUMNS):
        return None
    df = df.sort_values("t")
    last = df.iloc[-1]
    if last[list(COLUMNS)].isna().any():
        return None
    end = last[list(COLUMNS)].to_numpy(np.float64)
    start = np.zeros_like(end)
    if len(df) > 1 and not df.iloc[0][list(COLUMNS)].isna().any():
        start = df.iloc[0][list(COLUMNS)].to_numpy(np.float64)
    d = dict(zip(COLUMNS, (end - start).tolist()))
    cap = float(last.get("capacity_tokens") or 0)
    steps, pressure = int(d["share_steps"]), int(d["pressure_steps"])
    if steps <= 0 or cap <= 0:
        return None
    every = {k: d[f"{k}_slot_steps"] / (steps * cap) for k in SHARE_KEYS}
    under = None
    if pressure > 0:
        under = {k: d[f"{k}_slot_steps_pressure"] / (pressure * cap) for k in SHARE_KEYS}
    return SpanShares(steps, pressure, every, under)


def span_text(s: SpanShares) -> str:
    """One caption: the pressure steps with their fraction, then both averages."""
    def fmt(shares: dict[str, float]) -> str:  # the glossary's words: slack = reserved + internal
        slack = shares["reserved"] + shares["internal"]
        return (f"used {shares['used']:.1%} · slack {slack:.1%} (reserved "
                f"{shares['reserved']:.1%}, internal {shares['internal']:.1%}) · free "
                f"{shares['free']:.1%}")

    head = (f"{s.steps:,} steps, under memory pressure in {s.pressure_steps:,} "
            f"({s.pressure_steps / s.steps:.1%}). Mean over all steps: {fmt(s.all_steps)}. ")
    if s.pressure is None:
        return head + f"Over memory-pressure steps: {NEVER}."
    return head + f"Over memory-pressure steps: {fmt(s.pressure)}."
