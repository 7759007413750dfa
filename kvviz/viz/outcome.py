"""What explains a lane's admission failures: its admissions, finishes, batch, throughput and
preemptions beside them, and one sentence per lane derived from those numbers.

A lane that admits more requests at once fills its memory sooner, so it meets more refusals
and, when decode growth outruns the free blocks, preempts: more failures can go with more
work done. The sentences say so from the lane's own numbers against the first lane's.
"""
from __future__ import annotations

import pandas as pd

CLASSES = (("capacity", "CAPACITY"), ("fragmentation", "FRAGMENTATION"), ("policy", "POLICY"))
WHY = {
    "CAPACITY": "fewer free slots in total than the request's {need}",
    "FRAGMENTATION": "enough free slots in total, but no hole large enough for the request's "
                     "{need}",
    "POLICY": "memory was there, the scheduler held the request back (watermark or batch "
              "limit)",
}


HELP = {
    "admitted": "admissions, re-admissions after a preemption included (finished + "
                "preemptions)",
    "finished": "requests that ran to their last token",
    "rejected": "requests that can never fit this lane (longer than its capacity)",
    "mean batch": "requests running at once, averaged over the lane's steps (tokens generated "
                  "per step)",
    "tokens / s": "tokens generated per simulated second",
    "preemptions": "running requests evicted to free memory for others (recomputed later)",
    "CAPACITY": "refusals: fewer free slots in total than the rounded need",
    "FRAGMENTATION": "refusals: enough free slots in total, no hole large enough",
    "POLICY": "refusals: memory was there, the scheduler held the request back",
}
WIDTHS = {"lane": 185, "admitted": 80, "finished": 75, "rejected": 75, "mean batch": 90,
          "tokens / s": 85, "preemptions": 100, "CAPACITY": 85, "FRAGMENTATION": 120,
          "POLICY": 70}


def outcome_frame(df: pd.DataFrame) -> pd.DataFrame:
    """One row per lane of kvviz.viz.compare.summary_frame: what its failures go with.
    `rejected` only when a lane rejected anything (HELP explains every column)."""
    out = pd.DataFrame({"lane": df["lane"]})
    out["admitted"] = df["admissions"]
    out["finished"] = df["finished"]
    if (df["rejected"] > 0).any():
        out["rejected"] = df["rejected"]
    out["mean batch"] = df["mean_batch"].round(1)
    out["tokens / s"] = df["tokens_per_sim_s"].round(0)
    out["preemptions"] = df["preemptions"]
    for key, name in CLASSES:
        out[name] = df[key]
    return out


def _need(lane: str) -> str:
    if lane.startswith("paged"):
        return "blocks"
    if lane.endswith(":max"):
        return "reservation (the maximum sequence length)"
    return "range"


def _ratio(a: float, b: float) -> str:
    x = a / b
    return f"{x:.1f}x as many as" if x >= 1 else f"{1 / x:.1f}x fewer than"


def lane_sentence(row: pd.Series, ref: pd.Series | None) -> str:
    """Why this lane's failures and preemptions are what they are, from its numbers."""
    lane = str(row["lane"])
    fails = {name: int(row[key]) for key, name in CLASSES}
    total = sum(fails.values())
    batch, pre = float(row["mean_batch"]), int(row["preemptions"])
    parts = [f"{lane} ran {batch:.1f} requests at once on average"]
    if ref is not None and ref["lane"] != lane and float(ref["mean_batch"]) > 0:
        parts[0] += (f", {_ratio(batch, float(ref['mean_batch']))} {ref['lane']} "
                     f"({float(ref['mean_batch']):.1f})")
    if total == 0 and pre == 0:
        parts.append("and never met a refusal or a preemption: memory never ran short")
    else:
        worst = max(fails, key=lambda k: (fails[k], k == "FRAGMENTATION"))
        if total:
            parts.append(f"most of its {total:,} refusals are {worst} "
                         f"({fails[worst]:,}): " + WHY[worst].format(need=_need(lane)))
        ref_total = 0 if ref is None else sum(int(ref[k]) for k, _ in CLASSES)
        if (ref is not None and ref["lane"] != lane and total > ref_total
                and batch > 1.2 * float(ref["mean_batch"])):
            parts.append("it admits more, so it reaches the limit of memory more often: more "
                         "refusals here go with more work done")
        if pre:
            parts.append(f"{pre:,} preemptions: running requests grew by decode past the free "
                         "memory, so the youngest was evicted and recomputed later")
    parts.append(f"{float(row['tokens_per_sim_s']):,.0f} tokens / simulated s, all done in "
                 f"{int(row['steps']):,} steps")
    return "; ".join(parts) + "."


def lane_sentences(df: pd.DataFrame) -> list[str]:
    """One sentence per lane, each compared with the first lane."""
    ref = df.iloc[0] if len(df) else None
    return [lane_sentence(r, ref) for _, r in df.iterrows()]
