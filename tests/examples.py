"""How many examples a property test draws.

Each test names its own count, the one CI runs. `KVVIZ_EXAMPLES` (a factor in (0, 100],
default 1) scales every count: below 1 for a quick loop while editing (the fast subset in
README runs with 0.25), above 1 for a deeper search before a release. The draws are
random on every run either way (hypothesis is not derandomized), so CI keeps finding new
cases; a quick run just looks at fewer of them.
"""
from __future__ import annotations

import math
import os


def _factor() -> float:
    raw = os.environ.get("KVVIZ_EXAMPLES", "1")
    try:
        f = float(raw)
    except ValueError:
        f = math.nan
    if not 0 < f <= 100:
        raise ValueError(f"KVVIZ_EXAMPLES={raw!r}: a factor in (0, 100] (1: each test's own count)")
    return f


FACTOR = _factor()


def examples(n: int) -> int:
    """n scaled by KVVIZ_EXAMPLES, at least 1."""
    return max(1, math.ceil(n * FACTOR))
