"""What FORMAT.md says is stored, where a reader could assume otherwise: `meta.collector`'s
fields, and which block maps retention leaves (a lane's first map may be gone). The other two
such places, a paged lane's external_frag_index (0) and a buddy lane's largest_hole_tokens
(the largest aligned free power-of-two block), are metrics: checks.metrics recomputes them.
"""
from __future__ import annotations

import math

COLLECTOR = ("hz", "steps_per_s", "loop", "duration_s", "max_steps")


def _number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def collector(meta: dict) -> list[str]:
    """meta.collector, when present: exactly COLLECTOR, each of its documented type."""
    c = meta.get("collector")
    if c is None:
        return []  # recordings made before kvviz wrote it
    if not isinstance(c, dict):
        return [f"meta.collector is {type(c).__name__}, not an object"]
    bad = []
    if set(c) != set(COLLECTOR):
        bad.append(f"meta.collector holds {sorted(c)}, FORMAT.md documents {sorted(COLLECTOR)}")
    rules = {
        "hz": (lambda v: _number(v) and v > 0, "a number > 0"),
        "steps_per_s": (lambda v: _number(v) and v >= 0, "a number >= 0 (0 = unpaced)"),
        "loop": (lambda v: isinstance(v, bool), "true or false"),
        "duration_s": (lambda v: v is None or (_number(v) and v > 0), "null or a number > 0"),
        "max_steps": (lambda v: v is None or (isinstance(v, int) and not isinstance(v, bool)
                                              and v >= 1), "null or an integer >= 1"),
    }
    for key, (ok, what) in rules.items():
        if key in c and not ok(c[key]):
            bad.append(f"meta.collector.{key} is {c[key]!r:.60}, not {what}")
    return bad


def retention(idxs: list[int], stride: int) -> list[str]:
    """A lane's kept map idx values against Retention: every one a multiple of the stride or
    the newest, and the multiples kept a run without holes from the oldest kept one to the
    newest map (older ones, idx 0 included, may all be gone)."""
    if not idxs:
        return []
    top = max(idxs)
    have = set(idxs)
    bad = [f"map idx {i} kept although idx % stride {stride} != 0 and it is not the lane's "
           "newest" for i in sorted(i for i in have if i % stride and i != top)]
    kept = sorted(i for i in have if i % stride == 0)
    if kept:
        missing = [i for i in range(kept[0], top + 1, stride) if i not in have]
        if missing:
            bad.append(f"maps idx {missing[:5]} (idx % stride {stride} == 0, newer than the "
                       f"kept idx {kept[0]}) are missing")
    return bad
