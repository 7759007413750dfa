"""Block ids in the self-check: a side's block tables after one step, and their comparison,
exact or under one renumbering of the pool's blocks (kvviz/twin/selfcheck.py)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Tables:
    """The block tables after one step: request seqs[i] holds
    blocks[sum(lens[:i]) : sum(lens[:i + 1])] (vLLM's numbering), seqs sorted."""

    seqs: np.ndarray  # int64
    lens: np.ndarray  # int64
    blocks: np.ndarray  # int64

    @classmethod
    def of(cls, table: dict) -> Tables:
        seqs = np.array(sorted(int(r) for r in table), np.int64)
        parts = [np.asarray(table[r] if r in table else table[str(r)], np.int64).ravel()
                 for r in seqs.tolist()] if seqs.size else []
        return cls(seqs, np.array([p.size for p in parts], np.int64),
                   np.concatenate(parts) if parts else np.zeros(0, np.int64))

    def ids(self, seq: int) -> np.ndarray | None:
        i = int(np.searchsorted(self.seqs, seq))
        if i >= self.seqs.size or self.seqs[i] != seq:
            return None
        start = int(self.lens[:i].sum())
        return self.blocks[start:start + int(self.lens[i])]


def shown(a: np.ndarray | None, limit: int = 8) -> str:
    if a is None:
        return "not running"
    if not a.size:
        return "none"
    s = ", ".join(str(int(x)) for x in a[:limit])
    return s + (f", ... ({a.size} in all)" if a.size > limit else "")


class Renumbering:
    """A one-to-one map between the node's and the replay's block ids, grown as steps are
    compared: the node's pool began in an order the recording does not hold, so its ids may
    be the replay's under one fixed renumbering, never two."""

    def __init__(self) -> None:
        self.fwd: dict[int, int] = {}
        self.bwd: dict[int, int] = {}

    def agrees(self, node: np.ndarray, twin: np.ndarray) -> int | None:
        """Index of the first pair that breaks the map (None: all agree; the map grows)."""
        for i, (x, y) in enumerate(zip(node.tolist(), twin.tolist())):
            if self.fwd.setdefault(x, y) != y or self.bwd.setdefault(y, x) != x:
                return i
        return None


def tables_differ(step: int, node: Tables, twin: Tables, renum: Renumbering | None
                   ) -> dict | None:
    """The first request whose block ids differ after `step`, else None."""
    if renum is None and np.array_equal(node.seqs, twin.seqs) and np.array_equal(
            node.lens, twin.lens) and np.array_equal(node.blocks, twin.blocks):
        return None
    for r in sorted(set(node.seqs.tolist()) | set(twin.seqs.tolist())):
        a, b = node.ids(r), twin.ids(r)
        same = a is not None and b is not None and a.size == b.size and (
            np.array_equal(a, b) if renum is None else renum.agrees(a, b) is None)
        if not same:
            what = f"block ids of request {r}" + ("" if renum is None else
                                                  " (under one renumbering of the pool)")
            return {"step": step, "what": what, "node": shown(a), "replay": shown(b)}
    return None
