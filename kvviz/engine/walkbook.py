"""The pressure walk's bookkeeping (kvviz/engine/walk.py): its running requests, each one's
blocks by the steps its decodes open them, its finish step and its slack, and the allocator
ops they make (take, admit, free), in execution order, for `PagedAllocator.replay_window`.
"""
from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

import numpy as np

from kvviz.alloc.paged_window import ADMIT, FREE_SEQ, TAKE
from kvviz.engine.eventlog import KIND_CODE
from kvviz.engine.scheduler import make_room

if TYPE_CHECKING:
    from kvviz.engine.lane import Lane

FINISHED = KIND_CODE["finished"]


class Running(dict):
    """The running requests in vLLM's order (a dict's insertion order): removal anywhere in
    O(1), and pop() takes the last one, as `make_room` pops a running list."""

    def pop(self) -> int:  # type: ignore[override]
        return self.popitem()[0]


class Book:
    """Per running request: the slots written before its first decode in the walk (L0),
    that step (t0) and its samples before it (g0), its finish step (fstep), and where its
    last block starts (thr) with the slots that block leaves unused (waste); the running
    requests in order (run), by opening residue (bucket) and by finish step (fin), each in
    running order; per request preempted in the walk, its known tokens and samples; the
    free blocks; the allocator's ops and the events, in execution order."""

    def __init__(self, lane: Lane, ids: np.ndarray, lens: np.ndarray) -> None:
        sched, a = lane.sched, lane.alloc
        self.lane, self.sched = lane, sched
        self.bs = bs = a.block_size
        self.S = S = lane.step_no
        run = ids.tolist()
        self.run = Running.fromkeys(run)
        L = lens.tolist()
        self.L0 = dict(zip(run, L))
        self.t0 = dict.fromkeys(run, S + 1)
        self.g0 = dict(zip(run, sched.generated[ids].tolist()))
        self.bucket: list[dict[int, None]] = [{} for _ in range(bs)]
        for r, x in zip(run, L):
            self.bucket[(S + 1 - x) % bs][r] = None
        self.fin: dict[int, dict[int, None]] = {}  # step -> the requests finishing then
        self.fstep = dict(zip(run, sched.finish_steps(S, ids, True).tolist()))
        for r, f in self.fstep.items():
            self.fin.setdefault(f, {})[r] = None
        kvf = lane.kv_final[ids]
        last = -(-kvf // bs)
        thr = (last - 1) * bs
        self.thr = dict(zip(run, thr.tolist()))
        self.waste = dict(zip(run, (last * bs - kvf).tolist()))
        inside = lens > thr
        self.internal = int((last * bs - kvf)[inside].sum())
        self.lastopen: dict[int, list[tuple[int, int]]] = {}  # step -> (request, t0)
        for r, s in zip(ids[~inside].tolist(), (S + 1 + thr - lens)[~inside].tolist()):
            self.lastopen.setdefault(s, []).append((r, S + 1))
        self.used = int(lens.sum())
        self.free = a.free_blocks
        self.front = deque(sched.front)
        self.wait_known: dict[int, int] = {}  # preempted in the walk, waiting
        self.wait_gen: dict[int, int] = {}
        self.finished: dict[int, int] = {}  # finished in the walk: slots written
        self.kinds: list[int] = []  # the allocator's ops (replay_window's), in order
        self.seqs: list[int] = []
        self.args: list[int] = []
        self.events: list[tuple] = []  # (step, kind, request, reason, need, free[, hole])
        self.preemptions = 0

    def length(self, r: int, t: int) -> int:
        """Slots running request r holds at the start of step t."""
        return self.L0[r] + t - self.t0[r]

    def _decode(self, openers: dict[int, None], t: int) -> None:
        """Every running request decodes; each of `openers` takes a block (they fit)."""
        k = len(openers)
        if k:
            self.kinds.extend([TAKE] * k)
            self.seqs.extend(openers)
            self.args.extend([0] * k)
        self._decoded(t)

    def _decoded(self, t: int) -> None:
        """After step t's decodes: the slots they wrote, the blocks they opened last."""
        self.used += len(self.run)
        if t in self.lastopen:
            self._opened(t)

    def _opened(self, t: int) -> None:
        """The running requests that opened their last block at step t."""
        run, t0 = self.run, self.t0
        for r, s in self.lastopen.pop(t):
            if r in run and t0[r] == s:  # still running since it was planned
                self.internal += self.waste[r]

    def _decode_short(self, openers: dict[int, None], t: int, preempted: list[int]) -> None:
        """The decodes when the free blocks do not cover the openers, in running order:
        while free blocks are left an opener takes one (make_room preempts nobody for it);
        one that finds none makes room by the rule (`make_room`: the running tail is
        preempted until a block frees, or the opener itself is)."""
        run, kinds, seqs, args = self.run, self.kinds, self.seqs, self.args
        todo = list(openers)
        k = self.free
        if k:
            kinds.extend([TAKE] * k)
            seqs.extend(todo[:k])
            args.extend([0] * k)
            self.free = 0

        def fits() -> bool:
            return self.free > 0

        def drop(v: int) -> None:
            self._preempt(v, t, preempted)

        for r in todo[k:]:
            if r not in run:  # preempted for an opener before it: so is every later one
                break
            if not self.free and not make_room(run, r, fits, drop):
                break
            self.free -= 1
            kinds.append(TAKE)
            seqs.append(r)
            args.append(0)
        self._decoded(t)

    def _preempt(self, v: int, t: int, preempted: list[int]) -> None:
        """The rule preempted v (out of `run` already) before its decode in step t."""
        held = self.length(v, t)
        self.wait_gen[v] = self.g0[v] + t - self.t0[v]
        self.wait_known[v] = held + 1
        self._release(v, held)
        self.front.appendleft(v)
        preempted.append(v)
        self.preemptions += 1

    def _release(self, r: int, held: int) -> None:
        """r (out of `run`) frees its blocks with `held` slots written; its running
        bookkeeping ends."""
        bs = self.bs
        self.kinds.append(FREE_SEQ)
        self.seqs.append(r)
        self.args.append(held)
        self.free += -(-held // bs)
        self.used -= held
        if held > self.thr[r]:
            self.internal -= self.waste[r]
        del self.bucket[(self.t0[r] - self.L0[r]) % bs][r]
        due = self.fin.get(self.fstep.pop(r))
        if due is not None:  # (a finishing request's step was popped already)
            del due[r]

    def _join(self, r: int, total: int, t: int) -> None:
        """r is admitted at step t with its whole `total` known tokens: it samples then and
        decodes from step t + 1."""
        bs, sched = self.bs, self.sched
        self.kinds.append(ADMIT)
        self.seqs.append(r)
        self.args.append(total)
        if r in self.wait_known:
            g = self.wait_gen.pop(r) + 1
            del self.wait_known[r]
        else:
            g = int(sched.generated[r]) + 1
        self.run[r] = None
        self.L0[r], self.t0[r], self.g0[r] = total, t + 1, g
        self.bucket[(t + 1 - total) % bs][r] = None
        f = self.fstep[r] = t + int(sched.w.output[r]) - g
        self.fin.setdefault(f, {})[r] = None
        kvf = int(self.lane.kv_final[r])
        last = -(-kvf // bs)
        self.thr[r], self.waste[r] = (last - 1) * bs, last * bs - kvf
        if total > self.thr[r]:
            self.internal += self.waste[r]
        else:
            self.lastopen.setdefault(t + 1 + self.thr[r] - total, []).append((r, t + 1))
        self.used += total

    def _update(self, t: int) -> None:
        """update(): the requests whose output is complete finish, in running order (a
        step's finishers were added to fin[t] in running order: the running requests at the
        walk's start in their order, each admitted one after them)."""
        fins = self.fin.pop(t, None)
        if not fins:
            return
        run, L0, t0 = self.run, self.L0, self.t0
        for r in fins:
            held = L0[r] + t - t0[r] + 1
            del run[r]
            self._release(r, held)
            self.finished[r] = held
            self.events.append((t, FINISHED, r, 0, 0, 0))
