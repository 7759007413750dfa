"""The lean lane's paged memory: a count of free blocks and the running sequences' phases.

Without sharing a sequence of length L holds ceil(L / block_size) blocks, and block identity
shows only in block maps (which a lean run never takes), so the pool is one number. A running
sequence r writes its slot off[r] + T at step T and opens a block at step T when
(off[r] + T - 1) % block_size == 0: sequences with the same phase off[r] % block_size open
blocks at the same steps, so the blocks a span takes, the held-block sum over it and the
first step at which the pool runs short are O(distinct phases) per span, not O(running):

    phase p opens its first block of the span at step T + k_p, k_p = (-p - T) % bs + 1,
    then every bs steps; opened(j) = q * running + (blocks of phases with k_p <= r),
    j = q * bs + r.

Internal waste: a sequence whose final length is F wastes ceil(F / bs) * bs - F slots from the
step it enters its final block; those steps are a heap (`ents`) crossed by spans.
"""
from __future__ import annotations

import heapq

from kvviz.engine.lean.queue import CAPACITY, PREEMPTED, LeanLane


class LeanPaged(LeanLane):
    def __init__(self, lane) -> None:
        super().__init__(lane)
        self.bs = bs = lane.alloc.block_size
        self.nb = lane.capacity // bs
        self.free = self.nb  # free blocks
        self.phases: dict[int, int] = {}  # off % bs -> running sequences
        self.internal = 0  # slots never written in final blocks (sequences inside them)
        self.waste = [(-f) % bs for f in self.final]  # per request: its final block's waste
        self.enter = [0] * self.n_req  # running: the step it enters its final block
        self.ents: list[tuple[int, int, int]] = []  # heap (enter step, ticket, request)
        self.watermark = lane.cfg.watermark > 0

    # ---- the allocator's answers ----------------------------------------------------------
    def check(self, n: int, r: int | None) -> tuple:
        bs = self.bs
        nb = -(-n // bs)
        free = self.free * bs
        return (True, 0, nb * bs, free, free) if nb <= self.free else (
            False, CAPACITY, nb * bs, free, free)

    def admit(self, rid: int, n: int, r: int | None) -> int | None:
        bs = self.bs
        nb = -(-n // bs)
        keep = -(-self.keep_now // bs) if self.keep_now else 0
        if nb > self.free - keep:
            return None
        self.free -= nb
        off = n - self.T
        p = off % bs
        self.phases[p] = self.phases.get(p, 0) + 1
        w = self.waste[rid]
        if w:
            e = (-(-self.final[rid] // bs) - 1) * bs + 1 - off
            self.enter[rid] = e
            if e <= self.T:
                self.internal += w
            else:
                heapq.heappush(self.ents, (e, self.ticket, rid))
        return self.free * bs

    def _forget(self, rid: int, length: int, upto: int) -> None:
        """Forget a running sequence of `length` slots (final blocks entered through
        `upto`); its blocks are the caller's to count."""
        p = self.off[rid] % self.bs
        c = self.phases[p] - 1
        if c:
            self.phases[p] = c
        else:
            del self.phases[p]
        self.used -= length
        if self.waste[rid] and self.enter[rid] <= upto:
            self.internal -= self.waste[rid]

    def release(self, rid: int) -> None:
        length = self.off[rid] + self.T
        self.free += -(-length // self.bs)
        self._forget(rid, length, self.T)

    def _cross(self, upto: int) -> int:
        """Enter final blocks through step `upto`; returns the span's internal slot-steps
        from those entries (each counts from its step through `upto`)."""
        ents, run, extra = self.ents, self.run, 0
        while ents and ents[0][0] <= upto:
            e, tk, rid = heapq.heappop(ents)
            if run.get(rid) == tk:
                w = self.waste[rid]
                self.internal += w
                extra += w * (upto - e + 1)
        return extra

    # ---- decode ---------------------------------------------------------------------------
    def decode(self) -> None:
        n = len(self.run)
        if not n:
            return
        T = self.T
        need = self.phases.get((1 - T) % self.bs, 0)
        if need <= self.free:
            self.free -= need
        else:
            n = self._preempt()
        self.used += n
        self.tokens += n
        if self.ents and self.ents[0][0] <= T:
            self._cross(T)

    def _preempt(self) -> int:
        """append_batch + preempt_from_tail at a step whose blocks run short; returns how
        many sequences keep running (and decode). Costs one pass to find the sequences that
        need a block, then O(victims): they come from the tail."""
        bs, T, off = self.bs, self.T, self.off
        ids = list(self.run)
        ph = (1 - T) % bs
        needers = [i for i, r in enumerate(ids) if off[r] % bs == ph]  # their last block is full
        avail = self.free
        failed = needers[avail:]  # later sequences lose: no block left for them
        failed_set = set(failed)
        # the shortest suffix whose blocks cover one block for each failed sequence before it
        j, freed, cut = len(failed), 0, 0
        for c in range(len(ids) - 1, -1, -1):
            x = off[ids[c]] + T - 1  # slots written before this step
            freed += x // bs + (c not in failed_set)  # a failed one did not get its block
            while j and failed[j - 1] >= c:
                j -= 1
            if freed >= j:
                cut = c
                break
        free = freed  # every free block went to the first needers; the suffix came back
        again = []  # failed before the cut and failed again: retried in order, while blocks last
        for i in failed[:j]:
            if free:
                free -= 1
            else:
                again.append(i)
        self.free = free + sum((off[ids[i]] + T - 1) // bs for i in again)  # released after
        lost = [ids[i] for i in again] + ids[cut:]
        for r in lost:
            self._forget(r, off[r] + T - 1, T - 1)
            del self.run[r]
            self.generated[r] = self.output[r] - (self.fin[r] - T + 1)
            self.events.extend((T, PREEMPTED, r, 0, 0, 0, 0))
        self.front.extendleft(reversed(lost))
        self.just_preempted.update(lost)
        self.preemptions += len(lost)
        self.pressure = True
        return len(ids) - len(lost)

    # ---- shares and spans -----------------------------------------------------------------
    def step_sums(self) -> tuple[int, int, int, int, int, float]:
        """(used, reserved, internal, free, tail, efi) of step T."""
        alloc = (self.nb - self.free) * self.bs
        used, internal = self.used, self.internal
        return used, alloc - used - internal, internal, self.free * self.bs, alloc - used, 0.0

    def _free_floor(self) -> int:
        if not self.waiting:
            return 0
        rid = self.front[0] if self.front else self.next_new
        need = -(-(self.prompt[rid] + self.generated[rid]) // self.bs)
        marks = [need]
        if self.watermark and self.run:
            marks.append(need + -(-self.keep // self.bs))
        return max([0, *(m for m in marks if self.free >= m)])

    def horizon(self, limit: int) -> int:
        n = len(self.run)
        m = limit if not n else min(limit, self.next_finish() - 1 - self.T)
        if m <= 0 or not n:
            return max(m, 0)
        budget = self.free - (self._free_floor() if self.front or self.arrived > self.next_new
                              else 0)
        bs = self.bs
        if budget >= n * (m // bs + 1):  # each sequence opens at most that many blocks
            return m
        q, rem = divmod(budget, n)
        acc = 0
        T = self.T
        for k, h in sorted([((-p - T) % bs + 1, h) for p, h in self.phases.items()]):
            if acc + h > rem:
                return min(m, q * bs + k - 1)
            acc += h
        return m  # not reached: rem < n

    def span(self, m: int) -> tuple[int, int, int, int, int]:
        """Apply m decode-only steps; returns their (used, reserved, internal, free, tail)
        sums."""
        bs, n = self.bs, len(self.run)
        q, r = divmod(m, bs)
        # phase p opens blocks at steps T + k, T + k + bs, ... (k = (-p - T) % bs + 1): q of
        # them in the span, one more when k <= r. w, s: sequences with k <= r, their sum of k
        w = s = s_all = 0
        t = -self.T
        if q:
            for p, h in self.phases.items():
                k = (t - p) % bs + 1
                s_all += h * k
                if k <= r:
                    w += h
                    s += h * k
        elif r < len(self.phases):  # fewer offsets than phases: phase (t - j) % bs has k = j + 1
            get = self.phases.get
            for j in range(r):
                h = get((t - j) % bs)
                if h:
                    w += h
                    s += h * (j + 1)
        else:
            for p, h in self.phases.items():
                k = (t - p) % bs + 1
                if k <= r:
                    w += h
                    s += h * k
        opened = q * n + w
        opened_sum = (w * ((q + 1) * (m + 1) - bs * (q + 1) * q // 2) - (q + 1) * s
                      + (n - w) * (q * (m + 1) - bs * q * (q - 1) // 2) - q * (s_all - s))
        held = self.nb - self.free
        alloc = bs * (m * held + opened_sum)
        used = m * self.used + n * m * (m + 1) // 2
        internal = m * self.internal
        ents = self.ents
        if ents and ents[0][0] <= self.T + m:
            internal += self._cross(self.T + m)
        self.free -= opened
        self.used += n * m
        self.tokens += n * m
        self.T += m
        return used, alloc - used - internal, internal, m * self.nb * bs - alloc, alloc - used
