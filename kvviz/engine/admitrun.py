"""Admission runs: Scheduler._admit's loop for a long wave of waiting requests, as runs.

A step that admits thousands of waiting requests (a burst into an empty cache) asks the
rule one head at a time in `_admit`; after a few (`RUN_AFTER`, kvviz/engine/scheduler.py)
the next heads are asked as a run: `Scheduler.admit_run` (verdict's limits and the space's
memory test in closed form over the run) says how many of them are admitted whole, and
`PagedSpace.admit_many` places them with one block take, in the same order, with the same
blocks and free counts as one by one. The head a run stops at is asked one by one again.
A mixin over Scheduler's state; tests/engine/test_admit_runs.py compares runs on and off.
"""
from __future__ import annotations

from itertools import islice

import numpy as np

FIRST_RUN = 64  # heads in the first run; each full run asks four times as many next


class AdmitRuns:
    def _admit_run(self, budget: int, ids: list[int], counts: list[int], admitted: list[int],
                   hits_out: list[int], free_out: list[int]) -> int:
        """_admit's loop for runs of heads at once, while `admit_run` admits them whole: the
        same admissions, in the same order, placed by one `PagedSpace.admit_many` per run.
        Only where no head has hits or is live (a paged lane without prefix caching).
        Returns the tokens admitted (0: none, the loop asks the head one by one)."""
        space = self.space
        if self.caching or not hasattr(space, "admit_many"):
            return 0
        m, taken = FIRST_RUN, 0
        while self.waiting_count:
            heads = self.heads(m)
            big = self.too_big[heads]
            if big.any():  # a rejection: _admit's business
                heads = heads[:int(np.argmax(big))]
            totals = self.num_tokens[heads]
            k = self.admit_run(totals, len(self.running), budget - taken,
                               space.alloc.free_blocks)
            if not k:
                break
            heads, totals = heads[:k], totals[:k]
            free_out.extend(space.admit_many(heads, totals).tolist())
            self.pop_heads(k)
            run = heads.tolist()
            self.running.extend(run)
            self._ids = None
            self.computed[heads] = totals
            ids.extend(run)
            admitted.extend(run)
            counts.extend(totals.tolist())
            hits_out.extend([0] * k)
            taken += int(totals.sum())
            if k < m:
                break
            m *= 4
        return taken

    def heads(self, m: int) -> np.ndarray:
        """The first (up to) m waiting requests, in queue order."""
        front = list(islice(self.front, m))
        new = np.arange(self.next_new, min(self.arrived, self.next_new + m - len(front)))
        return np.concatenate([np.asarray(front, np.int64), new]) if front else new

    def pop_heads(self, k: int) -> None:
        """pop_head() k times."""
        f = min(k, len(self.front))
        for _ in range(f):
            self.front.popleft()
        self.next_new += k - f
