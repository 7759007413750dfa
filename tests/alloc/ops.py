"""Random operation sequences for the allocator property tests, and the configurations."""
from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st

from kvviz.alloc import ContiguousAllocator, PagedAllocator, PrefixKey
from kvviz.alloc.base import Allocator

PREFIX_LEN = 7  # every group's shared prompt; a sequence shares min(PREFIX_LEN, prompt)


@dataclass(frozen=True)
class Config:
    name: str
    make: Callable[[], Allocator]
    paged: bool = False
    prefix: bool = False

    def __str__(self) -> str:
        return self.name


CONFIGS = [
    Config("paged:1", lambda: PagedAllocator(40, 1), paged=True),
    Config("paged:3", lambda: PagedAllocator(14, 3), paged=True),
    Config("paged:16", lambda: PagedAllocator(5, 16), paged=True),
    Config("paged:1:prefix", lambda: PagedAllocator(40, 1, prefix_caching=True), True, True),
    Config("paged:3:prefix", lambda: PagedAllocator(14, 3, prefix_caching=True), True, True),
    Config("paged:16:prefix", lambda: PagedAllocator(5, 16, prefix_caching=True), True, True),
    Config("first-fit:1", lambda: ContiguousAllocator(41, "first-fit")),
    Config("first-fit:4", lambda: ContiguousAllocator(43, "first-fit", cell_tokens=4)),
    Config("best-fit:1", lambda: ContiguousAllocator(41, "best-fit")),
    Config("best-fit:4", lambda: ContiguousAllocator(43, "best-fit", cell_tokens=4)),
    Config("buddy:1", lambda: ContiguousAllocator(45, "buddy")),  # regions 32 + 8 + 4 + 1
    Config("buddy:4", lambda: ContiguousAllocator(55, "buddy", cell_tokens=4)),  # 8 + 4 + 1
]

size = st.integers(1, 20)
extra = st.none() | st.integers(0, 10)
group = st.none() | st.integers(0, 1)
pick = st.integers(0, 1000)

OP = st.one_of(
    st.tuples(st.just("admit"), size, extra, group),
    st.tuples(st.just("append"), pick, st.integers(1, 6)),
    st.tuples(st.just("append_batch"), st.lists(pick, max_size=6)),
    st.tuples(st.just("admit_many"), st.lists(st.tuples(size, extra, group), max_size=4),
              st.sampled_from([0, 0, 3, 8])),
    st.tuples(st.just("release"), pick),
    st.tuples(st.just("release_many"), st.lists(pick, min_size=1, max_size=4)),
    st.tuples(st.just("fork"), pick),
)
OPS = st.lists(OP, min_size=1, max_size=30)


class Runner:
    """Applies ops to an allocator, tracking each live sequence's length (the model).

    `after(runner, op, before)` runs after every op with the state observed before it.
    """

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.alloc = cfg.make()
        self.lens: dict[int, int] = {}
        self.next_id = 0

    def _live(self, i: int) -> int | None:
        if not self.lens:
            return None
        live = sorted(self.lens)
        return live[i % len(live)]

    def _picks(self, idx: list[int]) -> list[int]:
        out: list[int] = []
        for i in idx:
            s = self._live(i)
            if s is not None and s not in out:
                out.append(s)
        return out

    def _prefix(self, g: int | None) -> PrefixKey | None:
        return None if g is None or not self.cfg.prefix else PrefixKey(g, PREFIX_LEN)

    def _new_id(self) -> int:
        self.next_id += 1
        return self.next_id - 1

    def apply(self, op: tuple):
        """Run one op; returns its result (Admission, ok array, count or None)."""
        kind = op[0]
        a = self.alloc
        if kind == "admit":
            _, n, ext, g = op
            sid = self._new_id()
            adm = a.admit(sid, n, None if ext is None else n + ext, self._prefix(g))
            if adm.ok:
                self.lens[sid] = n
            return adm
        if kind == "append":
            s = self._live(op[1])
            if s is None:
                return None
            adm = a.append(s, op[2])
            if adm.ok:
                self.lens[s] += op[2]
            return adm
        if kind == "append_batch":
            ids = self._picks(op[1])
            ok = a.append_batch(np.array(ids, np.int64))
            for s, good in zip(ids, ok.tolist()):
                if good:
                    self.lens[s] += 1
            return ok
        if kind == "admit_many":
            _, cands, keep = op
            ids = np.array([self._new_id() for _ in cands], np.int64)
            n = np.array([c[0] for c in cands], np.int64)
            res = None
            if any(c[1] is not None for c in cands):
                res = np.array([c[0] + (c[1] or 0) for c in cands], np.int64)
            prefixes = [self._prefix(c[2]) for c in cands] if self.cfg.prefix else None
            k = a.admit_many(ids, n, res, prefixes, keep)
            for s, m in zip(ids[:k].tolist(), n[:k].tolist()):
                self.lens[s] = m
            return k
        if kind == "release":
            s = self._live(op[1])
            if s is not None:
                a.release(s)
                del self.lens[s]
            return None
        if kind == "release_many":
            ids = self._picks(op[1])
            if not ids:  # release_many([]) is tested on its own (tests/alloc/test_paged.py)
                return None
            a.release_many(np.array(ids, np.int64))
            for s in ids:
                del self.lens[s]
            return None
        if kind == "fork":
            s = self._live(op[1])
            if s is None or not self.cfg.paged:
                return None
            child = self._new_id()
            adm = a.fork(s, child)
            if adm.ok:
                self.lens[child] = self.lens[s]
            return adm
        raise AssertionError(kind)

    def run(self, ops: list[tuple], after: Callable[[Runner, tuple, object, object], None]):
        for op in ops:
            before = copy.deepcopy(self.alloc)
            result = self.apply(op)
            after(self, op, before, result)

    def release_all(self, order: list[int] | None = None) -> None:
        live = sorted(self.lens)
        if order:
            live = [live[i % len(live)] for i in order if live] + live
            live = list(dict.fromkeys(live))
        for s in live:
            self.alloc.release(s)
            del self.lens[s]
