"""Random operation sequences for the pool property tests, and the pool configurations."""
from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st

from kvviz.core.config import LaneSpec
from kvviz.engine.kvpool import KVPool, Prefix

PREFIX_LEN = 7  # every group's shared prompt; a sequence shares min(PREFIX_LEN, prompt)


@dataclass(frozen=True)
class Config:
    name: str
    spec: LaneSpec
    capacity: int

    @property
    def paged(self) -> bool:
        return self.spec.allocator == "paged"

    @property
    def prefix(self) -> bool:
        return self.spec.prefix_caching

    def make(self) -> KVPool:
        return KVPool(self.spec, self.capacity)

    def __str__(self) -> str:
        return self.name


def _paged(bs: int, cap: int, prefix: bool = False) -> Config:
    return Config(f"paged:{bs}" + (":prefix" if prefix else ""),
                  LaneSpec("paged", bs, prefix_caching=prefix), cap)


def _contiguous(placement: str, cell: int, cap: int) -> Config:
    return Config(f"{placement}:{cell}", LaneSpec("contiguous", cell, placement), cap)


CONFIGS = [
    _paged(1, 40), _paged(3, 42), _paged(16, 80),
    _paged(1, 40, True), _paged(3, 42, True), _paged(16, 80, True),
    _contiguous("first-fit", 1, 41), _contiguous("first-fit", 4, 43),
    _contiguous("best-fit", 1, 41), _contiguous("best-fit", 4, 43),
    _contiguous("buddy", 1, 45),  # regions 32 + 8 + 4 + 1
    _contiguous("buddy", 4, 55),  # 13 cells: regions 8 + 4 + 1
]

size = st.integers(1, 20)
extra = st.none() | st.integers(0, 10)
group = st.none() | st.integers(0, 1)
pick = st.integers(0, 1000)

OP = st.one_of(
    st.tuples(st.just("admit"), size, extra, group),
    st.tuples(st.just("append"), pick, st.integers(1, 6)),
    st.tuples(st.just("append_batch"), st.lists(pick, max_size=6)),
    st.tuples(st.just("release"), pick),
)
OPS = st.lists(OP, min_size=1, max_size=30)
# many short sequences admitted, every other one or so releasing one: holes of many sizes
CHURN = st.lists(st.tuples(st.integers(1, 6), st.none() | st.integers(0, 3), group, pick,
                           st.booleans()), min_size=10, max_size=30).map(
    lambda xs: [op for n, ext, g, i, out in xs
                for op in [("admit", n, ext, g)] + [("release", i)] * out])


class Runner:
    """Applies ops to a pool, tracking each live sequence's length (the model).

    `after(runner, op, before, result)` runs after every op with a copy of the pool as it
    was before it.
    """

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.pool = cfg.make()
        self.lens: dict[int, int] = {}
        self.next_id = 0

    def _live(self, i: int) -> int | None:
        live = sorted(self.lens)
        return live[i % len(live)] if live else None

    def picks(self, idx: list[int]) -> list[int]:
        out: list[int] = []
        for i in idx:
            s = self._live(i)
            if s is not None and s not in out:
                out.append(s)
        return out

    def prefix(self, g: int | None) -> Prefix | None:
        if g is None or not self.cfg.prefix:
            return None
        return Prefix([g] * -(-PREFIX_LEN // self.cfg.spec.block_size), PREFIX_LEN)

    def reserve(self, n: int, ext: int | None) -> int | None:
        return None if ext is None or self.cfg.paged else n + ext

    def apply(self, op: tuple):
        """Run one op; returns its result (an Admission, ok flags, or None)."""
        kind, a = op[0], self.pool
        if kind == "admit":
            _, n, ext, g = op
            sid = self.next_id
            adm = a.admit(sid, n, self.reserve(n, ext), self.prefix(g))
            if adm.ok:
                self.lens[sid] = n
                self.next_id += 1
            return adm
        if kind == "append":
            s = self._live(op[1])
            if s is None:
                return None
            ok = a.append(s, op[2])
            if ok:
                self.lens[s] += op[2]
            return ok
        if kind == "append_batch":
            ids = self.picks(op[1])
            ok = a.append_batch(np.array(ids, np.int64))
            for s, good in zip(ids, ok.tolist()):
                self.lens[s] += good
            return ok
        if kind == "release":
            s = self._live(op[1])
            if s is not None:
                a.release(s)
                del self.lens[s]
            return None
        raise AssertionError(kind)

    def run(self, ops: list[tuple], after: Callable[[Runner, tuple, object, object], None],
            before: bool = True):
        """Apply ops, calling `after` after each; `before` False passes None for the copy."""
        for op in ops:
            was = copy.deepcopy(self.pool) if before else None
            result = self.apply(op)
            after(self, op, was, result)

    def release_all(self, order: list[int] | None = None) -> None:
        live = sorted(self.lens)
        if order and live:
            live = list(dict.fromkeys([live[i % len(live)] for i in order] + live))
        for s in live:
            self.pool.release(s)
            del self.lens[s]
