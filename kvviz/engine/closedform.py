"""Closed forms the engine's fast paths share: block counts over runs of lengths, the step
an arrival is first seen, the multiples of the block size a run of decodes crosses."""
from __future__ import annotations

import numpy as np


def block_sums(x: np.ndarray, b: int) -> tuple[int, int]:
    """Over y = 1..x, summed over the elements of x (>= 0): (sum of ceil(y / b), and sum of
    (-y) mod b, the unwritten slots of the last block)."""
    q, r = np.divmod(x, b)
    sq, sr, qq, rq, rr = int(q.sum()), int(r.sum()), int(q @ q), int(r @ q), int(r @ r)
    return (b * (qq + sq) // 2 + rq + sr,
            sq * (b * (b - 1) // 2) + b * sr - (rr + sr) // 2)


def arrival_steps(t: np.ndarray, after: int, step_ms: float) -> np.ndarray | None:
    """Per arrival time (sorted), the first step > after whose clock (the step loop's own
    arithmetic, step * step_ms / 1000) reaches it; None when the clock is too coarse."""
    x = t * 1000.0 / step_ms
    if x.size and not x[-1] < 2.0 ** 52:
        return None
    s = np.maximum(np.ceil(x).astype(np.int64) - 1, after + 1)
    for _ in range(8):
        low = s * step_ms / 1000.0 < t
        if not low.any():
            break
        s += low
    else:
        return None
    for _ in range(8):
        high = (s - 1 > after) & ((s - 1) * step_ms / 1000.0 >= t)
        if not high.any():
            return s
        s -= high
    return None


def every_multiple(lo: np.ndarray, hi: np.ndarray, bs: int, at: np.ndarray, end: int):
    """Per request i, the multiples L of bs in [lo_i, hi_i] with at_i + L <= end:
    (request, at_i + L, L), by request then L."""
    q0, q1 = -(-lo // bs), hi // bs
    cnt = np.maximum(0, q1 - q0 + 1)
    who = np.repeat(np.arange(lo.size), cnt)
    L = (q0[who] + np.arange(who.size) - np.repeat(np.cumsum(cnt) - cnt, cnt)) * bs
    step = at[who] + L
    keep = step <= end
    return who[keep], step[keep], L[keep]
