"""How many configurations may run at once: what-if's memory, by totals, before any runs.

Each worker process holds an interpreter, the request stream and one configuration's pool at
a time; the parent holds the stream too. The figures are kvviz/settings/memory.py's (the
same ones `simulate` checks). With `workers` processes the worst moment is the `workers`
largest pools at once, so the count is cut to what fits the limit (said in a note), and a
run whose largest configuration alone does not fit is one error naming the total and the
limit, before a worker starts.
"""
from __future__ import annotations

from kvviz.settings import memory
from kvviz.twin.settings import NodeSettings


def fit_workers(configs: list[NodeSettings], requests: int, workers: int,
                budget_mb: float | None = None,
                available: int | None = None) -> tuple[int, str | None]:
    """(workers to use, a note when fewer than asked), or KvvizError when one will not fit."""
    if available is None:  # read once, for the check and the limit
        available = memory.available_bytes()
    stream = requests * memory.REQUEST_BYTES
    parent = stream + memory.BASE_BYTES  # the stream and an interpreter: so is each worker
    pools = sorted((memory.lane_bytes(c.lane(), c.capacity_tokens) for c in configs),
                   reverse=True)
    # one worker: its pool and its own stream and interpreter beside the parent's; none
    # (workers <= 1, the runs in this process): the pool beside the parent
    one = parent + pools[0] + (parent if workers > 1 else 0)
    memory.check(memory.Need(one, 0, (
        ("the largest configuration's block metadata", pools[0]),
        (f"{requests} requests", stream), ("the interpreter", memory.BASE_BYTES))),
        budget_mb, available=available)  # the error names the limit
    limit = memory.limit_bytes(budget_mb, available)
    if workers <= 1 or limit is None:
        return workers, None
    total, fit = parent, 0
    for pool in pools[:workers]:
        if total + pool + parent > limit:
            break
        total += pool + parent
        fit += 1
    fit = max(1, fit)
    if fit >= workers:
        return workers, None
    return fit, (f"running {fit} configuration{'s' if fit != 1 else ''} at a time, not "
                 f"{workers}: more at once would need more than the limit of "
                 f"{memory.mb(limit)}")
