"""The pressure walk's bookkeeping (kvviz/engine/walk.py): its running requests, each one's
blocks by the steps its decodes open them, its finish step and its slack; the allocator
ops they make (take, admit, free), in execution order, for `PagedAllocator.replay_window`,
and the events, both written as arrays once (`ops`, `event_columns`); the internal slack
of every step, summed in closed form over the requests' lives (`internal_sums`).
"""
from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

import numpy as np

from kvviz.alloc.paged_window import ADMIT, FREE_SEQ, TAKE
from kvviz.engine.eventlog import KIND_CODE, EventColumns
from kvviz.engine.scheduler import make_room

if TYPE_CHECKING:
    from kvviz.engine.lane import Lane

FINISHED, PREEMPTED = KIND_CODE["finished"], KIND_CODE["preempted"]
ADMITTED, FAILED = KIND_CODE["admitted"], KIND_CODE["admit_failed"]


class Tail:
    """The running requests (Book.run: a dict in vLLM's order, removal anywhere in O(1)) as
    `make_room` pops a running list: pop() takes the last one, its record kept in
    `popped`. (run stays a plain dict: a subclass's lookups are slower.)"""

    __slots__ = ("run", "popped")

    def __init__(self, run: dict[int, tuple]) -> None:
        self.run = run
        self.popped: tuple = ()

    def pop(self) -> int:
        r, self.popped = self.run.popitem()
        return r


def _spans(first: list[int], n: list[int]) -> np.ndarray:
    """The op indices of runs of ops (each: its first op, its ops), in order."""
    k = np.asarray(n, np.int64)
    return np.repeat(np.asarray(first, np.int64) - (np.cumsum(k) - k), k) + np.arange(sum(n))


class Book:
    """The running requests in order (run), each with its record: (base, gbase, life, thr,
    waste, fstep): it holds base + t slots and has sampled gbase + t tokens at the start
    of step t in the walk; its last block starts at slot thr and leaves `waste` slots
    unused; it samples its last token at step fstep. Per life (running since the walk's
    start or admitted in it), by its index: the step from which its last block's unused
    slots count as internal (the decode that opens it, or its admission), the step from
    which they no longer do (its finish step, or its preemption) and those slots. The running
    requests by opening residue (bucket: base % bs == -t % bs) and by finish step (fin),
    each in running order; per request preempted in the walk, its known tokens and
    samples; the free blocks. The ops: `seqs`, every op's request in execution order, a
    TAKE unless it is in a run of admissions (adm, adm_n: each run's first op and ops;
    their tokens, free blocks after each and steps), a run of finishes (done: the same; a finished
    request frees its whole life, kv_final slots) or a preemption's free (pre_at: its op,
    slots and step); the refusals logged: (the next op's index, event row)."""

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
        n0 = len(run)
        self.run = dict(zip(run, zip(base, (sched.generated[ids] - S - 1).tolist(),
                                     range(n0), thr.tolist(), waste.tolist(),
                                     fstep.tolist())))
        self.tail = Tail(self.run)
        self.life_from = (thr - lens + S + 1).tolist()  # (see the class) from S + 1 at most
        self.life_to = fstep.tolist()
        self.life_waste = waste.tolist()
        self.bucket: list[dict[int, None]] = [{} for _ in range(bs)]
        for r, x in zip(run, base):
            self.bucket[-x % bs][r] = None
        self.fin: dict[int, dict[int, None]] = {}  # step -> the requests finishing then
        fin = self.fin
        for r, f in zip(run, fstep.tolist()):
            due = fin.get(f)
            if due is None:
                fin[f] = {r: None}
            else:
                due[r] = None
        self.used = int(lens.sum())
        self.free = a.free_blocks
        self.front = deque(sched.front)
        self.wait_known: dict[int, int] = {}  # preempted in the walk, waiting
        self.wait_gen: dict[int, int] = {}
        self.seqs: list[int] = []  # the ops (see the class)
        self.adm: list[int] = []  # (first op of each run)
        self.adm_n: list[int] = []
        self.adm_total: list[int] = []
        self.adm_free: list[int] = []
        self.adm_t: list[int] = []
        self.done: list[int] = []
        self.done_n: list[int] = []
        self.done_t: list[int] = []
        self.pre_at: list[int] = []
        self.pre_held: list[int] = []
        self.pre_t: list[int] = []
        self.refusals: list[tuple[int, tuple]] = []  # (next op, (step, kind, ... hole))
        self.preemptions = 0
        self.t = S  # the step being walked, where a method needs it

    def _decode_short(self, openers: dict[int, None], t: int) -> bool:
        """The decodes when the free blocks do not cover the openers, in running order:
        while free blocks are left an opener takes one (make_room preempts nobody for it);
        one that finds none makes room by the rule (`make_room`: the running tail is
        preempted until a block frees, or the opener itself is). Returns whether anyone
        was preempted. The openers still running are a prefix of them (a bucket is in
        running order, the rule preempts the tail): those after a room made take the
        blocks it freed in a row."""
        run, seqs, before = self.run, self.seqs, self.preemptions
        todo = list(openers)
        m = len(todo)
        i = self.free
        if i:
            seqs.extend(todo[:i])
            self.free = 0
        self.t = t  # (_preempt's step)
        tail, fits, drop = self.tail, self._fits, self._preempt
        while i < m:
            r = todo[i]
            if r not in run:  # preempted for an opener before it: so is every later one
                break
            if not make_room(tail, r, fits, drop):  # type: ignore[arg-type]
                break
            j = min(i + self.free, m)  # these take a block each while they still run
            if todo[j - 1] not in run:
                lo, hi = i, j - 1  # todo[lo] runs, todo[hi] does not
                while hi - lo > 1:
                    mid = (lo + hi) // 2
                    if todo[mid] in run:
                        lo = mid
                    else:
                        hi = mid
                j = hi
            seqs.extend(todo[i:j])  # TAKEs
            self.free -= j - i
            i = j
        self.used += len(run)
        return self.preemptions > before

    def _fits(self) -> bool:
        """make_room's test: a free block for the opener."""
        return self.free > 0

    def _preempt(self, v: int) -> None:
        """The rule preempted v (out of `run` already) before its decode in step t (self.t):
        it frees its blocks (its event comes first in the step: Lane.step's order) and
        waits at the front of the queue."""
        t, rec = self.t, self.tail.popped
        held = rec[0] + t
        self.wait_gen[v] = rec[1] + t
        self.wait_known[v] = held + 1
        self.pre_at.append(len(self.seqs))
        self.pre_held.append(held)
        self.pre_t.append(t)
        self.seqs.append(v)
        self.free += -(-held // self.bs)
        self.used -= held
        self.life_to[rec[2]] = t
        del self.bucket[-rec[0] % self.bs][v]
        del self.fin[rec[5]][v]
        self.front.appendleft(v)
        self.preemptions += 1

    def _join(self, admitted: list[int], totals: list[int], t: int) -> None:
        """The requests admitted at step t, in order, each with its whole `totals` known
        tokens (their ops are written): each samples then and decodes from step t + 1."""
        bs, sched, run, bucket, fin = self.bs, self.sched, self.run, self.bucket, self.fin
        wait_known, wait_gen = self.wait_known, self.wait_gen
        output, kv_final, generated = sched.w.output, self.lane.kv_final, sched.generated
        life_from, life_to, life_waste, t1 = self.life_from, self.life_to, self.life_waste, t + 1
        used = 0
        for r, total in zip(admitted, totals):
            g = (wait_gen.pop(r) if wait_known.pop(r, None) is not None
                 else generated.item(r)) + 1
            f = t + output.item(r) - g
            kvf = kv_final.item(r)
            waste = -kvf % bs  # its last block's slots left unused
            thr = kvf + waste - bs  # where that block starts
            base = total - t1
            run[r] = (base, g - t1, len(life_to), thr, waste, f)
            bucket[-base % bs][r] = None
            due = fin.get(f)
            if due is None:
                fin[f] = {r: None}
            else:
                due[r] = None
            life_from.append(t if total > thr else thr - base)  # (the step it opens it)
            life_to.append(f)
            life_waste.append(waste)
            used += total
        self.used += used

    def _update(self, t: int) -> None:
        """update(): the requests whose output is complete finish, in running order (a
        step's finishers were added to fin[t] in running order: the running requests at the
        walk's start in their order, each admitted one after them), each freeing its whole
        life: kv_final slots, the last of its blocks opened (thr + bs - waste slots)."""
        fins = self.fin.pop(t, None)
        if not fins:
            return
        run, bucket, bs = self.run, self.bucket, self.bs
        thr = waste = 0
        for r in fins:
            rec = run[r]
            del run[r]
            del bucket[-rec[0] % bs][r]
            thr += rec[3]
            waste += rec[4]
        n = len(fins)
        self.done.append(len(self.seqs))
        self.done_n.append(n)
        self.done_t.append(t)
        self.seqs.extend(fins)
        self.free += thr // bs + n
        self.used -= thr + n * bs - waste

    def internal_sums(self, end: int, hsteps: list[int]) -> tuple[int, int]:
        """The internal slack summed over the walk's steps up to `end` (its last): over the
        steps not in `hsteps`, and over those (sorted)."""
        S = self.S
        lo = np.clip(np.asarray(self.life_from, np.int64), S + 1, end + 1)
        hi = np.minimum(np.asarray(self.life_to, np.int64), end + 1)
        w = np.where(hi > lo, np.asarray(self.life_waste, np.int64), 0)
        flag = np.zeros(end - S + 1, np.int64)
        flag[np.asarray(hsteps, np.int64) - S] = 1
        before = np.cumsum(flag)  # [i]: pressure steps among S + 1 .. S + i
        every = int(w @ (hi - lo))
        pressure = int(w @ (before[hi - 1 - S] - before[lo - 1 - S]))
        return every - pressure, pressure

    def ops(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """replay_window's kind, seq and arg arrays."""
        seq = np.fromiter(self.seqs, np.int64, len(self.seqs))
        kind = np.full(seq.size, TAKE, np.int64)
        arg = np.zeros(seq.size, np.int64)
        self._seq = seq
        self._adm = at = _spans(self.adm, self.adm_n)
        kind[at], arg[at] = ADMIT, self.adm_total
        self._done = at = _spans(self.done, self.done_n)
        kind[at], arg[at] = FREE_SEQ, self.lane.kv_final[seq[at]]
        if self.pre_at:
            kind[self.pre_at], arg[self.pre_at] = FREE_SEQ, self.pre_held
        return kind, seq, arg

    def finished(self) -> np.ndarray:
        """The requests finished in the walk, in order (after ops())."""
        return self._seq[self._done]

    def event_columns(self, lane_code: int, lanes: list[str], step_ms: float) -> EventColumns:
        """The walk's events in execution order (after ops()): preemptions, admissions and
        finishes by their ops, each refusal before the op after it."""
        seq, bs, adm, done = self._seq, self.bs, self._adm, self._done
        n = np.asarray([len(self.pre_at), adm.size, done.size, len(self.refusals)])
        at = np.concatenate([np.asarray(self.pre_at, np.int64), adm, done])
        cols = np.zeros((7, int(n.sum())), np.int64)  # step, kind, seq ... hole
        cols[0, :at.size] = np.concatenate([
            np.asarray(self.pre_t, np.int64),
            np.repeat(np.asarray(self.adm_t, np.int64), self.adm_n),
            np.repeat(np.asarray(self.done_t, np.int64), self.done_n)])
        cols[1, :at.size] = np.repeat([PREEMPTED, ADMITTED, FINISHED], n[:3])
        cols[2, :at.size] = seq[at]
        k = n[0] + adm.size
        cols[4, n[0]:k] = self.adm_total
        cols[5, n[0]:k] = np.asarray(self.adm_free, np.int64) * bs
        key = 2 * at
        if self.refusals:
            cols[:, at.size:] = np.asarray([row for _, row in self.refusals], np.int64).T
            key = np.concatenate([key, 2 * np.asarray([i for i, _ in self.refusals]) - 1])
        cols = cols[:, np.argsort(key, kind="stable")]
        step = cols[0]
        m = step.size
        return EventColumns({
            "time_s": step * step_ms / 1000.0, "step": step,
            "lane": np.full(m, lane_code, np.int8), "kind": cols[1].astype(np.int8),
            "seq_id": cols[2], "reason": cols[3].astype(np.int8), "need_tokens": cols[4],
            "free_tokens": cols[5], "largest_hole_tokens": cols[6],
            "count": np.ones(m, np.int64)}, lanes)
