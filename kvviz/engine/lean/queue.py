"""The lean lane's scheduler: Lane.schedule / finish / the failure rules, in plain Python.

A LeanLane holds one lane's whole state as Python ints, lists and dicts (no numpy call per
event). Running sequences live in `run` (request id -> admission ticket, in admission order);
sequence r written to step T holds `off[r] + T` slots and finishes at step `fin[r]`. The memory
model (paged block count or contiguous ranges) is a subclass: check / admit / release / decode
and the share sums over a span. Events go into one int64 array, seven numbers each (step,
kind, seq, reason, need, free, largest), turned into EventColumns once, at the end.
"""
from __future__ import annotations

import heapq
from array import array
from collections import deque

from kvviz.engine.events import KIND_CODE, REASON_CODE

ADMITTED, FAILED, PREEMPTED, FINISHED, REJECTED = (
    KIND_CODE[k] for k in ("admitted", "admit_failed", "preempted", "finished", "rejected"))
CAPACITY, FRAGMENTATION, POLICY = (REASON_CODE[r] for r in ("CAPACITY", "FRAGMENTATION",
                                                            "POLICY"))
REASON_NAME = {CAPACITY: "CAPACITY", FRAGMENTATION: "FRAGMENTATION", POLICY: "POLICY"}


class LeanLane:
    """Scheduler state of one lane (see the module docstring). Subclasses implement the
    memory model: check(n, r) -> (ok, reason, need, free, largest), admit(rid, n, r) ->
    free slots after or None, release(rid), decode() and the share sums."""

    def __init__(self, lane) -> None:
        w, cfg = lane.w, lane.cfg
        self.n_req = len(w)
        self.prompt, self.output = w.prompt.tolist(), w.output.tolist()
        self.final = (w.prompt + w.output).tolist()
        self.too_big = lane.too_big.tolist()
        self.reserve = None if lane.reserve is None else lane.reserve.tolist()
        self.max_seqs, self.max_batched = cfg.max_num_seqs, cfg.max_batched_tokens
        self.capacity = lane.capacity
        self.keep = 0  # watermark slots (paged lanes, while something runs)
        self.keep_now = 0
        if cfg.watermark > 0 and lane.reserve is None:
            self.keep = int(cfg.watermark * lane.capacity)
        self.generated = [0] * self.n_req
        self.off = [0] * self.n_req  # running: slots written after step T = off + T
        self.fin = [0] * self.n_req  # running: the step it finishes in
        self.run: dict[int, int] = {}  # running request -> ticket, admission order
        self.fins: list[tuple[int, int, int]] = []  # heap (finish step, ticket, request)
        self.ticket = 0
        self.front: deque[int] = deque()  # preempted, readmitted first
        self.next_new = 0
        self.arrived = 0
        self.just_preempted: set[int] = set()
        self.T = 0
        self.done = self.rejected = self.preemptions = 0
        self.tokens = 0  # tokens generated
        self.used = 0  # slots written by running sequences (at step T)
        self.queries = 0  # prompt tokens admitted
        self.failures = {"CAPACITY": 0, "FRAGMENTATION": 0, "POLICY": 0}
        self.last_fail: tuple[int, int] | None = None
        self.pressure = False
        self.events = array("q")  # 7 int64 per event, see the module docstring

    # ---- the waiting queue ----------------------------------------------------------------
    @property
    def waiting(self) -> int:
        return len(self.front) + self.arrived - self.next_new

    def _pop(self, k: int) -> None:
        front = self.front
        while k and front:
            front.popleft()
            k -= 1
        self.next_new += k

    def _need_of(self, rid: int) -> tuple[int, int | None]:
        n = self.prompt[rid] + self.generated[rid]
        return n, None if self.reserve is None else max(n, self.reserve[rid])

    # ---- outcomes -------------------------------------------------------------------------
    def _fail(self, rid: int, adm: tuple) -> None:
        reason = adm[1]
        if reason != POLICY:
            self.pressure = True
        key = (rid, reason)
        if key != self.last_fail:
            self.last_fail = key
            self.failures[REASON_NAME[reason]] += 1
            self.events.extend((self.T, FAILED, rid, reason, adm[2], adm[3], adm[4]))

    def _refuse(self, rid: int) -> tuple:
        adm = self.check(*self._need_of(rid))
        if adm[0]:
            adm = (False, POLICY, *adm[2:])
        self._fail(rid, adm)
        return adm

    def _reject(self, rid: int, adm: tuple | None = None) -> None:
        if adm is None:
            whole = self.final[rid]
            if self.reserve is not None:
                whole = max(whole, self.reserve[rid])
            adm = self.check(whole, None)
        self.rejected += 1
        self.events.extend((self.T, REJECTED, rid, adm[1], adm[2], adm[3], adm[4]))

    # ---- phases ---------------------------------------------------------------------------
    def finish(self) -> None:
        fins, run, T = self.fins, self.run, self.T
        while fins and fins[0][0] <= T:
            _, tk, rid = heapq.heappop(fins)
            if run.get(rid) != tk:
                continue  # preempted since
            self.release(rid)
            del run[rid]
            self.generated[rid] = self.output[rid]
            self.done += 1
            self.events.extend((T, FINISHED, rid, 0, 0, 0, 0))

    def next_finish(self) -> int:
        """The earliest finish step of a running sequence (something runs)."""
        fins, run = self.fins, self.run
        while run.get(fins[0][2]) != fins[0][1]:
            heapq.heappop(fins)
        return fins[0][0]

    def _admit(self, rid: int, n: int, r: int | None) -> int | None:
        free = self.admit(rid, n, r)
        if free is None:
            return None
        T, tk = self.T, self.ticket
        self.ticket = tk + 1
        self.run[rid] = tk
        self.off[rid] = n - T
        f = T + max(1, self.output[rid] - self.generated[rid])
        self.fin[rid] = f
        heapq.heappush(self.fins, (f, tk, rid))
        self.used += n
        self.queries += n
        self.events.extend((T, ADMITTED, rid, 0, n, free, 0))
        return free

    def schedule(self) -> None:
        """Lane.schedule, one candidate at a time."""
        waiting = self.waiting
        if not waiting:
            return
        front, too_big = self.front, self.too_big
        running = len(self.run)
        slots = self.max_seqs - running
        while waiting:
            rid = front[0] if front else self.next_new
            if not too_big[rid]:
                break
            self._pop(1)
            self._reject(rid)
            waiting -= 1
        if not waiting or rid in self.just_preempted:
            return
        if slots > 0:  # fast refusal
            adm = self.check(*self._need_of(rid))
            if not adm[0] and (running or adm[1] == POLICY):
                self._fail(rid, adm)
                return
        if slots <= 0:
            self._refuse(rid)
            return
        limit = min(waiting, slots, 4096)
        self.keep_now = self.keep if running else 0
        cands, budget, k = 0, self.max_batched, 0
        fl = len(front)
        jp = self.just_preempted
        nxt = self.next_new
        stop_at = None  # the candidate that did not fit (None: every candidate went in)
        while cands < limit:
            c = front[cands] if cands < fl else nxt + cands - fl
            if too_big[c] or c in jp:
                break
            n, r = self._need_of(c)
            if cands and n > budget:  # the prefill token budget (at least one candidate)
                break
            budget -= n
            cands += 1
            if self._admit(c, n, r) is None:
                stop_at = c
                break
            k += 1
        self._pop(k)
        if k:
            self.last_fail = None
        if stop_at is not None:
            adm = self._refuse(stop_at)
            if adm[1] != POLICY and running == 0 and k == 0:
                self._pop(1)
                self._reject(stop_at, adm)
        elif self.waiting and running + k >= self.max_seqs:
            self._refuse(front[0] if front else self.next_new)

    # ---- the end --------------------------------------------------------------------------
    def write_back(self, lane) -> None:
        """The counters a summary reads, onto the Lane (its running set stays as it was:
        a lean run goes to the end, where nothing runs)."""
        import numpy as np

        lane.step_no = self.T
        lane.time_s = self.T * lane.cfg.step_ms / 1000.0
        lane.done, lane.rejected, lane.preemptions = self.done, self.rejected, self.preemptions
        lane.tokens_generated = self.tokens
        lane.prefix_query_tokens = self.queries
        lane.failures = dict(self.failures)
        lane.generated = np.asarray(self.generated, np.int64)
        lane.front = deque(self.front)
        lane.next_new, lane.arrived = self.next_new, self.arrived
        lane._last_fail = None if self.last_fail is None else (
            self.last_fail[0], REASON_NAME[self.last_fail[1]])
