"""What FORMAT.md says is stored, where a reader could assume otherwise: `meta.collector`'s
fields, and which block maps retention leaves (a lane's first map may be gone). The other two
such places, a paged lane's external_frag_index (0) and a buddy lane's largest_hole_tokens
(the largest aligned free power-of-two block), are metrics: checks.metrics recomputes them.
"""
from __future__ import annotations

import itertools
import math
import sqlite3
from collections.abc import Iterable, Iterator

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
    return list(retention_of(top, sorted({i for i in idxs if i % stride and i != top}),
                             sorted({i for i in idxs if i % stride == 0}), stride))


def retention_sql(db: sqlite3.Connection, lane: str, stride: int) -> Iterator[str]:
    """retention() of the lane's integer idx values, read in order from SQL (memory holds a
    few of them whatever the number of maps)."""
    of = "FROM blockmaps WHERE lane = ? AND typeof(idx) = 'integer'"
    top = db.execute(f"SELECT MAX(idx) {of}", (lane,)).fetchone()[0]
    if top is None:
        return
    odd = (i for (i,) in db.execute(f"SELECT DISTINCT idx {of} AND idx % ? != 0 AND idx != ? "
                                    "ORDER BY idx", (lane, stride, top)))
    kept = (i for (i,) in db.execute(f"SELECT DISTINCT idx {of} AND idx % ? = 0 ORDER BY idx",
                                     (lane, stride)))
    yield from retention_of(top, odd, kept, stride)


def retention_of(top: int, odd: Iterable[int], kept: Iterable[int],
                 stride: int) -> Iterator[str]:
    """The retention messages from the newest idx, the other non-multiples of the stride and
    the multiples, each distinct and ascending: the first five missing multiples named."""
    for i in odd:
        yield (f"map idx {i} kept although idx % stride {stride} != 0 and it is not the lane's "
               "newest")
    first = prev = None
    missing: list[int] = []
    for i in itertools.chain(kept, [None]):
        end = top + 1 if i is None else i  # the multiples between prev and i are missing
        if prev is not None:
            missing += itertools.islice(range(prev + stride, end, stride), 5 - len(missing))
        if i is None or len(missing) >= 5:
            break
        first = i if first is None else first
        prev = i
    if missing:
        yield (f"maps idx {missing} (idx % stride {stride} == 0, newer than the kept idx "
               f"{first}) are missing")
