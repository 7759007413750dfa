"""The pressure walk's bookkeeping (kvviz/engine/walk.py): its running requests, each one's
blocks by the steps its decodes open them, its finish step and its slack, and the allocator
ops they make (take, admit, free), in execution order, for `PagedAllocator.replay_window`.
"""
from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

import numpy as np

from kvviz.alloc.paged_window import ADMIT, FREE_SEQ
from kvviz.engine.eventlog import KIND_CODE
from kvviz.engine.scheduler import make_room

if TYPE_CHECKING:
    from kvviz.engine.lane import Lane

FINISHED, PREEMPTED = KIND_CODE["finished"], KIND_CODE["preempted"]


class Running(dict):
    """The running requests in vLLM's order (a dict's insertion order), each with its record
    (Book): removal anywhere in O(1), and pop() takes the last one, as `make_room` pops a
    running list (its record kept in `popped`)."""

    popped: tuple = ()

    def pop(self) -> int:  # type: ignore[override]
        r, self.popped = self.popitem()
        return r


class Book:
    """The running requests in order (run), each with its record: (base, gbase, t0, thr,
    waste, fstep): it holds base + t slots and has sampled gbase + t tokens at the start
    of step t >= t0, its first decode in the walk; its last block starts at slot thr and
    leaves `waste` slots unused; it samples its last token at step fstep. The running
    requests by opening residue (bucket: base % bs == -t % bs) and by finish step (fin),
    each in running order; per request preempted in the walk, its known tokens and
    samples; the free blocks; the allocator's ops and the events, in execution order."""

    def __init__(self, lane: Lane, ids: np.ndarray, lens: np.ndarray) -> None:
        sched, a = lane.sched, lane.alloc
        self.lane, self.sched = lane, sched
        self.bs = bs = a.block_size
        self.S = S = lane.step_no
        kvf = lane.kv_final[ids]
        last = -(-kvf // bs)
        thr = (last - 1) * bs
        waste = last * bs - kvf
        fstep = sched.finish_steps(S, ids, True)
        run = ids.tolist()
        base = (lens - S - 1).tolist()
        self.run = Running(zip(run, zip(base, (sched.generated[ids] - S - 1).tolist(),
                                        [S + 1] * len(run), thr.tolist(), waste.tolist(),
                                        fstep.tolist())))
        self.bucket: list[dict[int, None]] = [{} for _ in range(bs)]
        for r, x in zip(run, base):
            self.bucket[-x % bs][r] = None
        self.fin: dict[int, dict[int, None]] = {}  # step -> the requests finishing then
        for r, f in zip(run, fstep.tolist()):
            self.fin.setdefault(f, {})[r] = None
        inside = lens > thr
        self.internal = int(waste[inside].sum())
        self.lastopen: dict[int, list[tuple[int, int]]] = {}  # step -> (request, t0)
        for r, s in zip(ids[~inside].tolist(), (S + 1 + thr - lens)[~inside].tolist()):
            self.lastopen.setdefault(s, []).append((r, S + 1))
        self.used = int(lens.sum())
        self.free = a.free_blocks
        self.front = deque(sched.front)
        self.wait_known: dict[int, int] = {}  # preempted in the walk, waiting
        self.wait_gen: dict[int, int] = {}
        self.finished: dict[int, int] = {}  # finished in the walk: slots written
        self.seqs: list[int] = []  # the allocator's ops (replay_window's), in order: TAKE
        self.other: list[int] = []  # but these, flat: op index, kind, arg per op
        self.events: list[tuple] = []  # (step, kind, request, reason, need, free, hole)
        self.preemptions = 0

    def _decode(self, openers: dict[int, None], t: int) -> None:
        """Every running request decodes; each of `openers` takes a block (they fit)."""
        self.seqs.extend(openers)
        self._decoded(t)

    def _decoded(self, t: int) -> None:
        """After step t's decodes: the slots they wrote, the blocks they opened last."""
        self.used += len(self.run)
        if t in self.lastopen:
            self._opened(t)

    def _opened(self, t: int) -> None:
        """The running requests that opened their last block at step t."""
        run = self.run
        for r, s in self.lastopen.pop(t):
            rec = run.get(r)
            if rec is not None and rec[2] == s:  # still running since it was planned
                self.internal += rec[4]

    def _decode_short(self, openers: dict[int, None], t: int) -> bool:
        """The decodes when the free blocks do not cover the openers, in running order:
        while free blocks are left an opener takes one (make_room preempts nobody for it);
        one that finds none makes room by the rule (`make_room`: the running tail is
        preempted until a block frees, or the opener itself is). Returns whether anyone
        was preempted."""
        run, seqs, before = self.run, self.seqs, self.preemptions
        todo = list(openers)
        k = self.free
        if k:
            seqs.extend(todo[:k])
            self.free = 0

        def fits() -> bool:
            return self.free > 0

        def drop(v: int) -> None:
            self._preempt(v, t)

        for r in todo[k:]:
            if r not in run:  # preempted for an opener before it: so is every later one
                break
            if not self.free and not make_room(run, r, fits, drop):
                break
            self.free -= 1
            seqs.append(r)  # a TAKE
        self._decoded(t)
        return self.preemptions > before

    def _preempt(self, v: int, t: int) -> None:
        """The rule preempted v (out of `run` already) before its decode in step t: its
        event comes first in the step's (Lane.step's order)."""
        rec = self.run.popped
        held = rec[0] + t
        self.wait_gen[v] = rec[1] + t
        self.wait_known[v] = held + 1
        self._release([(v, held, rec)])
        self.front.appendleft(v)
        self.events.append((t, PREEMPTED, v, 0, 0, 0, 0))
        self.preemptions += 1

    def _release(self, gone: list[tuple[int, int, tuple]]) -> None:
        """Requests out of `run`, each (request, slots written, its record), free their
        blocks, in order; their running bookkeeping ends."""
        bs, other, seqs, bucket, fin = self.bs, self.other, self.seqs, self.bucket, self.fin
        freed = used = internal = 0
        for r, held, rec in gone:
            other += (len(seqs), FREE_SEQ, held)
            seqs.append(r)
            freed += -(-held // bs)
            used += held
            if held > rec[3]:
                internal += rec[4]
            del bucket[-rec[0] % bs][r]
            due = fin.get(rec[5])
            if due is not None:  # (a finishing request's step was popped already)
                del due[r]
        self.free += freed
        self.used -= used
        self.internal -= internal

    def _join(self, admitted: list[tuple[int, int, int]], t: int) -> None:
        """The requests admitted at step t, in order, each (request, its whole `total`
        known tokens, free slots after it): each samples then and decodes from step t + 1."""
        bs, sched, other, seqs, run, bucket, fin = (self.bs, self.sched, self.other, self.seqs,
                                                   self.run, self.bucket, self.fin)
        wait_known, wait_gen = self.wait_known, self.wait_gen
        output, kv_final, generated = sched.w.output, self.lane.kv_final, sched.generated
        lastopen, t1 = self.lastopen, t + 1
        used = internal = 0
        for r, total, _ in admitted:
            other += (len(seqs), ADMIT, total)
            seqs.append(r)
            g = (wait_gen.pop(r) if wait_known.pop(r, None) is not None
                 else generated.item(r)) + 1
            f = t + output.item(r) - g
            kvf = kv_final.item(r)
            waste = -kvf % bs  # its last block's slots left unused
            thr = kvf + waste - bs  # where that block starts
            base = total - t1
            run[r] = (base, g - t1, t1, thr, waste, f)
            bucket[-base % bs][r] = None
            due = fin.get(f)
            if due is None:
                fin[f] = {r: None}
            else:
                due[r] = None
            if total > thr:
                internal += waste
            else:
                opens = lastopen.get(t1 + thr - total)  # the step it opens its last block
                if opens is None:
                    lastopen[t1 + thr - total] = [(r, t1)]
                else:
                    opens.append((r, t1))
            used += total
        self.internal += internal
        self.used += used

    def _update(self, t: int) -> None:
        """update(): the requests whose output is complete finish, in running order (a
        step's finishers were added to fin[t] in running order: the running requests at the
        walk's start in their order, each admitted one after them)."""
        fins = self.fin.pop(t, None)
        if not fins:
            return
        run, finished, events = self.run, self.finished, self.events
        gone = []
        for r in fins:
            rec = run[r]
            del run[r]
            held = rec[0] + t + 1
            gone.append((r, held, rec))
            finished[r] = held
            events.append((t, FINISHED, r, 0, 0, 0, 0))
        self._release(gone)
