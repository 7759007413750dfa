"""Windows: many engine steps at once, admissions and finishes included, where no limit binds.

While every running request decodes, the rule (kvviz/engine/scheduler.py) decides each
next step the same way as long as no limit binds but max_num_seqs: each waiting request is
admitted with its whole prompt (the prefill completes and samples the first token) in the
first step that sees it with a seat free (kvviz/engine/seats.py: after its arrival, after
the request before it, after a finish), every running request decodes one token, and a
request finishes (and frees its blocks) in the update that samples its output length, its
last token without a slot. So the steps, the events and the shares of such a window follow
from the requests alone: a window takes up to ARRIVALS waiting or arriving requests, works
out that timeline in vectorised form, asks the rule where a limit would first bind, and
applies everything before that step at once. A head waiting for a seat is refused for
POLICY at each step until its seat, one admit_failed event where it is first refused.

How the window stays equal to the rule: the limits are the rule's own, asked in closed form
(`Scheduler.decodes_fit`: the budget pays every decode; `Scheduler.admitted_whole`: budget
and max_num_seqs at each admission, after `_answer`; `budget_after_decodes`: a refusal needs
budget left to be asked; too-big requests are rejected when first asked, an event, so a
window ends before one), and memory is the space's own test: `PagedSpace.fits` at every
admission (blocks + watermark), a free block at every decode that opens one, and a waiting
head's blocks free wherever it is refused (else its refusal would be CAPACITY), over the
free count the window's takes and frees leave in execution order; a contiguous lane asks its
space's `check` and `admit` in that order, on the real placement. The block ids come from
replaying the takes and frees in vLLM's order on the free queue
(`PagedAllocator.replay_window`).
tests/engine/test_span_equivalence.py and test_seat_windows.py compare every result with
stepping (advance="step").

Not windowed here (they step, or take quiet spans): a waiting head held by memory, the
budget or a preempted request at the front; contiguous and prefix-caching lanes while
someone waits (contiguous ones take queue windows, kvviz/engine/queue.py); real-mode lanes.
In a prefix-caching lane a window ends before an arrival whose first block may be cached
(`PagedSpace.may_hit`): its hit depends on the cache at that step; every block filled
inside is cached in its step.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from kvviz.engine.eventlog import KIND_CODE, REASON_CODE, EventColumns
from kvviz.engine.seats import seat_steps
from kvviz.engine.shares import add_repeated

EMPTY = np.zeros(0, np.int64)

if TYPE_CHECKING:
    from kvviz.engine.lane import Lane

ARRIVALS = 256  # arrivals one window plans over
MIN_WINDOW = 2  # shorter windows: a plain step costs less


def block_sums(x: np.ndarray, b: int) -> tuple[int, int]:
    """Over y = 1..x, summed over the elements of x (>= 0): (sum of ceil(y / b), and sum of
    (-y) mod b, the unwritten slots of the last block)."""
    q, r = np.divmod(x, b)
    sq, sr, qq, rq, rr = int(q.sum()), int(r.sum()), int(q @ q), int(r @ q), int(r @ r)
    return (b * (qq + sq) // 2 + rq + sr,
            sq * (b * (b - 1) // 2) + b * sr - (rr + sr) // 2)


def arrival_steps(t: np.ndarray, after: int, step_ms: float) -> np.ndarray | None:
    """Per arrival time (sorted), the first step > after whose clock (the step loop's own
    arithmetic, step * step_ms / 1000) reaches it; None when the clock is too coarse."""
    x = t * 1000.0 / step_ms
    if x.size and not x[-1] < 2.0 ** 52:
        return None
    s = np.maximum(np.ceil(x).astype(np.int64) - 1, after + 1)
    for _ in range(8):
        low = s * step_ms / 1000.0 < t
        if not low.any():
            break
        s += low
    else:
        return None
    for _ in range(8):
        high = (s - 1 > after) & ((s - 1) * step_ms / 1000.0 >= t)
        if not high.any():
            return s
        s -= high
    return None


def _every(lo: np.ndarray, hi: np.ndarray, bs: int, at: np.ndarray, end: int):
    """Per request i, the multiples L of bs in [lo_i, hi_i] with at_i + L <= end:
    (request, at_i + L, L), by request then L."""
    q0, q1 = -(-lo // bs), hi // bs
    cnt = np.maximum(0, q1 - q0 + 1)
    who = np.repeat(np.arange(lo.size), cnt)
    L = (q0[who] + np.arange(who.size) - np.repeat(np.cumsum(cnt) - cnt, cnt)) * bs
    step = at[who] + L
    keep = step <= end
    return who[keep], step[keep], L[keep]


def window(lane: Lane, arrival_s: np.ndarray, step_ms: float, stop: int | None) -> int:
    """Apply the window that starts after the lane's last step; returns its steps (0: none,
    step on)."""
    sched, w, a = lane.sched, lane.w, lane.alloc
    if not (a.contiguous or a.replayable):
        return 0
    waiting = sched.waiting_count > 0
    if waiting and (a.contiguous or sched.front or sched.caching):
        return 0
    if waiting and not sched.space.check(sched.head(), int(sched.num_tokens[sched.head()]),
                                         [], False).ok:
        return 0  # the head waits for memory
    S = lane.step_no
    ids = sched.running_ids()
    n0 = int(ids.size)
    c = sched.computed[ids]
    if n0 and (sched.num_tokens[ids] - c != 1).any():
        return 0
    lo, total = sched.next_new, arrival_s.size
    hi = min(lo + ARRIVALS, total)
    arrive = arrival_steps(arrival_s[lo:min(hi + 1, total)], S, step_ms)
    if arrive is None or (not n0 and hi == lo):
        return 0
    end = (1 << 62) if stop is None else stop
    ye = np.arange(lo, lo + arrive.size, dtype=np.int64)
    fin_x = sched.finish_steps(S, ids, True)
    lasts = sched.finish_steps(0, ye, False)
    steps, asked = seat_steps(arrive, fin_x, lasts, sched.cfg.max_num_seqs, S)
    if hi < total:
        end = min(end, int(steps[-1]) - 1)
    y = ye[:hi - lo]
    p = w.prompt[y].astype(np.int64)
    fin = np.concatenate([fin_x, steps[:y.size] + lasts[:y.size]])
    if hi == total:
        end = min(end, int(fin.max()))
    done = np.sort(fin)

    def running(s: np.ndarray) -> np.ndarray:  # running when step s schedules
        return n0 + np.searchsorted(steps, s, "left") - np.searchsorted(done, s, "left")

    steps = steps[:y.size]
    big = sched.too_big[ye]
    if big.any():  # rejected when first asked: an event
        end = min(end, int(asked[np.argmax(big)]) - 1)
    first = np.searchsorted(steps, steps, "left")
    slot = np.arange(y.size) - first
    cp = np.cumsum(p) - p
    run_y = running(steps)
    ok = sched.admitted_whole(run_y, slot, cp - cp[first], p)
    if sched.caching:  # an arrival whose first block may be cached: the step looks it up
        ok &= ~sched.space.may_hit(y)
    if a.contiguous:  # a range that must grow past its reservation may move or preempt
        if (a.seq_allocated_tokens(ids) < lane.kv_final[ids]).any():
            return 0
        ok &= a.footprints(np.maximum(p, lane.reserve[y])) >= lane.kv_final[y]
    if not ok.all():
        end = min(end, int(steps[np.argmin(ok)]) - 1)
    at = np.concatenate([[S + 1], steps + 1])
    fit = sched.decodes_fit(running(at))
    if not fit.all():
        end = min(end, int(at[np.argmin(fit)]) - 1)
    refused = _refusals(lane, ye, arrive.size, steps, asked, running, p, end)
    if refused is None:
        return 0
    end = min(end, refused[0])
    if a.contiguous and refused[2][0].size:  # its refusals name its ranges: step them
        end = min(end, int(refused[2][0].min()) - 1)
    if end - S < MIN_WINDOW:
        return 0
    plan = _Plan(lane, ids, c, y, p, steps, fin, run_y + slot == 0, refused[1:])
    end = plan.memory(end) if not lane.alloc.contiguous else plan.place(end)
    if end <= S:
        return 0
    plan.commit(end, step_ms, arrival_s)
    return end - S


def _refusals(lane: Lane, ye: np.ndarray, n: int, steps: np.ndarray, asked: np.ndarray,
              running, p: np.ndarray, end: int):
    """The heads that wait for a seat by step `end`: (the last step the window may take,
    (steps, requests) of their POLICY admit_failed events, (steps, requests) of every
    wait). Each waiting head is refused at every step until its seat, for POLICY while the
    free blocks cover it (`_Plan.memory` checks), with an event where it is first refused
    unless that refusal was the last one logged; an event needs budget left when the head
    is asked (else it is not asked)."""
    sched = lane.sched
    k = np.flatnonzero(asked[:n] < np.concatenate([steps, [end + 1]])[:n])
    k = k[asked[k] <= end]
    waits = (asked[k], ye[k])
    if k.size and lane.last_fail == (int(ye[0]), "POLICY"):
        k = k[k > 0]  # the head at the start was refused for a seat already
    if not k.size:
        return end, (EMPTY, EMPTY), waits
    t = asked[k]
    ps = np.concatenate([[0], np.cumsum(p)])
    left = sched.budget_after_decodes(running(t)) - (
        ps[np.searchsorted(steps, t, "right")] - ps[np.searchsorted(steps, t, "left")])
    if (left <= 0).any():
        end = min(end, int(t[np.argmax(left <= 0)]) - 1)
    return end, (t, ye[k]), waits


class _Plan:
    """One window's requests: the running ones (X), then the arrivals (Y), in the rule's
    running order."""

    def __init__(self, lane: Lane, ids, c, y, p, steps, fin, empty, refused) -> None:
        self.lane, self.y, self.p, self.steps, self.empty = lane, y, p, steps, empty
        self.fails, self.waits = refused  # (steps, requests): seat refusals, events / all
        self.fail_free: np.ndarray = EMPTY  # free tokens at each event
        self.n0, self.S = int(ids.size), lane.step_no
        self.jid = np.concatenate([ids, y])
        self.fin = fin
        self.base = np.concatenate([np.full(ids.size, self.S, np.int64), steps])
        self.l0 = np.concatenate([c, p])  # tokens computed after step `base`
        self.kv = lane.kv_final[self.jid]
        self.free_after: list[int] = []  # free tokens after each admission
        self.evicted = EMPTY  # per evicted block, the step that evicted it
        self.efi: list[tuple[int, float]] = []  # (step, efi from it on), contiguous lanes
        self.efi0 = efi_of(lane.alloc) if lane.alloc.contiguous else 0.0
        if lane.alloc.contiguous:  # reserved slots per request, read before the replay
            self.held = np.concatenate([lane.alloc.seq_allocated_tokens(ids), lane.alloc.footprints(
                np.maximum(p, lane.reserve[y]))]).astype(np.int64)

    def memory(self, end: int) -> int:
        """A paged lane: the last step <= end before which the free blocks serve every take
        and admission; replays the takes, fills and frees up to it."""
        lane, S, n0 = self.lane, self.S, self.n0
        a, space = lane.alloc, lane.sched.space
        bs = a.block_size
        ny = int(np.searchsorted(self.steps, end, "right"))
        J = n0 + ny
        l0, kv, base, fin = self.l0[:J], self.kv[:J], self.base[:J], self.fin[:J]
        # decodes write tokens l0+1 .. kv; the one writing token L+1 runs at base + L+1 - l0
        who, tstep, idx = _every(l0, kv - 1, bs, base - l0 + 1, end)  # L % bs == 0: a take
        parts = [(tstep, who, np.ones(who.size, np.int64))]
        if space.keys is not None:  # L+1 % bs == 0: a block filled, its key cached
            fw, fstep, fidx = _every(l0 + 1, kv, bs, base - l0, end)
            parts.append((fstep, fw, fidx // bs - 1))
        else:
            parts.append((EMPTY, EMPTY, EMPTY))
        fj = np.flatnonzero(fin <= end)
        parts += [(self.steps[:ny], np.arange(n0, J), self.p[:ny]), (fin[fj], fj, kv[fj])]
        step = np.concatenate([x[0] for x in parts])
        phase = np.repeat(np.arange(4), [x[0].size for x in parts])
        j = np.concatenate([x[1] for x in parts])
        arg = np.concatenate([x[2] for x in parts])
        order = np.lexsort((j, phase, step))
        step, phase, j, arg = step[order], phase[order], j[order], arg[order]
        nb = np.where(phase == 0, 1, np.where(phase == 1, 0, -(-arg // bs)))
        d = np.where(phase == 3, nb, -nb)
        before = a.free_blocks + np.cumsum(d) - d
        ok = np.ones(step.size, np.bool_)
        take, adm = phase == 0, phase == 2
        ok[take] = before[take] >= 1
        ok[adm] = space.fits(nb[adm], before[adm], self.empty[:ny])
        if self.waits[0].size:  # a head waiting for a seat: POLICY while its blocks are free
            need = -(-lane.w.prompt[self.waits[1]].astype(np.int64) // bs)
            low = (before + d < need.max()) & (phase != 3) & (step >= self.waits[0].min())
            at = self._free_at(self.waits[0], step, phase, d)
            if (at < need).any():  # the free blocks when it is first refused
                end = min(end, int(self.waits[0][np.argmax(at < need)]) - 1)
            ok &= ~low
        if not ok.all() or end < (int(step[-1]) if step.size else end):
            if not ok.all():
                end = min(end, int(step[np.argmin(ok)]) - 1)
            if end - S < MIN_WINDOW:
                return S
            cut = int(np.searchsorted(step, end, "right"))
            step, phase, j, arg, d = step[:cut], phase[:cut], j[:cut], arg[:cut], d[:cut]
        if self.fails[0].size:  # free blocks when each head is refused: after the
            keep = self.fails[0] <= end  # step's takes and admissions, before its frees
            self.fails = (self.fails[0][keep], self.fails[1][keep])
            self.fail_free = self._free_at(self.fails[0], step, phase, d) * bs
        live = self._live(end)
        after, evicted = a.replay_window(phase, self.jid[j], arg, self.jid[live],
                                         self._len(end)[live],
                                         None if space.keys is None else self._keys)
        self.free_after = [f * bs for f in after]
        self.evicted = step[np.asarray(evicted, np.int64)]
        return end

    def _free_at(self, t: np.ndarray, step, phase, d) -> np.ndarray:
        """The free blocks at the end of each step t's schedule (its takes and admissions
        done, its update's releases not yet), over the ops in execution order."""
        i = np.searchsorted(step * 4 + phase, t * 4 + 2, "right")
        return self.lane.alloc.free_blocks + np.concatenate([[0], np.cumsum(d)])[i]

    def _keys(self, r: int) -> list:
        """The keys of every block request r fills in its life."""
        lane = self.lane
        return lane.sched.space.keys.keys(r, int(lane.kv_final[r]) // lane.alloc.block_size)

    def place(self, end: int) -> int:
        """A contiguous lane: admissions and releases in execution order on the real
        placement, the space's check before each admission; stops before the first step
        whose admission is refused (undoing that step's earlier admissions)."""
        lane, S, n0 = self.lane, self.S, self.n0
        a, space = lane.alloc, lane.sched.space
        ny = int(np.searchsorted(self.steps, end, "right"))
        fj = np.flatnonzero(self.fin[:n0 + ny] <= end)
        step = np.concatenate([self.steps[:ny], self.fin[fj]])
        phase = np.repeat(np.arange(2), [ny, fj.size])
        j = np.concatenate([np.arange(n0, n0 + ny), fj])
        order = np.lexsort((j, phase, step))
        jid, l0 = self.jid.tolist(), self.l0.tolist()
        efi = self.efi
        cur, this = -1, []
        for s, ph, jj in zip(step[order].tolist(), phase[order].tolist(), j[order].tolist()):
            if s != cur:
                if cur >= 0:
                    efi.append((cur, efi_of(a)))
                cur, this = s, []
            r = jid[jj]
            if ph == 0:
                if not space.check(r, l0[jj], [], bool(self.empty[jj - n0])).ok:
                    for q in reversed(this):
                        space.free(q)
                    del self.free_after[len(self.free_after) - len(this):]
                    end, cur = s - 1, -1
                    break
                space.admit(r, l0[jj], [], l0[jj])
                this.append(r)
                self.free_after.append(a.usage().free_tokens)
            else:  # its decodes since l0 were never written: released with it
                space.free(r)
        if cur >= 0:
            efi.append((cur, efi_of(a)))
        if end > S:
            live = self._live(end)
            a.grow_each(self.jid[live], (self._len(end) - self.l0)[live])
        return end

    def _live(self, end: int) -> np.ndarray:
        """Per request of the plan: admitted by `end` and running after it."""
        return (self.fin > end) & (self.base <= end)

    def _len(self, end: int) -> np.ndarray:
        """Tokens computed after step `end` (the finished: all but the last)."""
        return self.kv - np.maximum(0, self.fin - end)

    def commit(self, end: int, step_ms: float, arrival_s: np.ndarray) -> None:
        """The scheduler's state, the lane's counters, events and shares after step end."""
        lane, n0 = self.lane, self.n0
        sched, w = lane.sched, lane.w
        ny = int(np.searchsorted(self.steps, end, "right"))
        J = n0 + ny
        jid, fin, kv = self.jid[:J], self.fin[:J], self.kv[:J]
        out = w.output[jid]
        gen0 = sched.generated[jid]
        left = np.maximum(0, fin - end)
        comp = kv - left
        sched.computed[jid] = comp
        sched.num_tokens[jid] = comp + 1
        sched.generated[jid] = out - left
        lane.tokens_generated += int((out - left - gen0).sum())
        live = left > 0
        sched._ids = jid[live]
        sched.running = sched._ids.tolist()
        if ny:
            sched.next_new = int(self.y[0]) + ny
        sched.arrived = max(sched.arrived, sched.next_new, int(np.searchsorted(
            arrival_s, end * step_ms / 1000.0, side="right")))
        fj = np.flatnonzero(~live)
        lane.done += int(fj.size)
        if ny:
            lane._last_fail = None
        keep = self.fails[0] <= end
        self.fails = ft, fr = self.fails[0][keep], self.fails[1][keep]
        if ft.size:
            lane.failures["POLICY"] += int(ft.size)
            if not ny or ft[-1] >= self.steps[ny - 1]:  # logged after the last admission
                lane._last_fail = (int(fr[-1]), "POLICY")
        if sched.caching:  # vLLM's prefix-cache queries: every admission's known tokens
            sched.query_tokens += int(self.p[:ny].sum())
            for r in self.jid[fj].tolist():
                sched.space.done(r)
        self._events(ny, fj, step_ms)
        self._shares(end, J, live)
        lane.step_no = end
        lane.time_s = end * step_ms / 1000.0

    def _events(self, ny: int, fj: np.ndarray, step_ms: float) -> None:
        """admitted, finished, evicted (one event per step, its count), in Lane.step's
        order."""
        lane = self.lane
        ev_step, count = np.unique(self.evicted, return_counts=True)
        lane._evictions_seen += int(self.evicted.size)
        ft, fr = self.fails
        nr, ne, nf = ft.size, ev_step.size, fj.size
        step = np.concatenate([self.steps[:ny], ft, self.fin[fj], ev_step])
        if not step.size:
            return
        k = step.size
        order = np.lexsort((np.concatenate([np.arange(ny), np.arange(nr), fj,
                                            np.zeros(ne, np.int64)]),
                            np.repeat([0, 1, 2, 3], [ny, nr, nf, ne]), step))
        zero = np.zeros(k, np.int64)
        kinds = np.array([KIND_CODE[x] for x in ("admitted", "admit_failed", "finished",
                                                 "evicted")], np.int8)
        need = -(-self.lane.w.prompt[fr].astype(np.int64) // lane.alloc.block_size)

        def col(*xs) -> np.ndarray:
            return np.concatenate([np.asarray(x, np.int64) for x in xs])[order]

        cols = {
            "time_s": step[order] * step_ms / 1000.0, "step": step[order],
            "lane": np.full(k, lane._code, np.int8),
            "kind": np.repeat(kinds, [ny, nr, nf, ne])[order],
            "seq_id": col(self.y[:ny], fr, self.jid[fj], np.full(ne, -1)),
            "reason": np.repeat(np.array([0, REASON_CODE["POLICY"], 0, 0], np.int8),
                                [ny, nr, nf, ne])[order],
            "need_tokens": col(self.p[:ny], need * lane.alloc.block_size, zero[:nf + ne]),
            "free_tokens": col(self.free_after, self.fail_free, zero[:nf + ne]),
            "largest_hole_tokens": col(zero[:ny], self.fail_free, zero[:nf + ne]),
            "count": col(np.ones(ny + nr + nf), count)}
        lane.events.extend(EventColumns(cols, lane.events.lanes))

    def _shares(self, end: int, J: int, live: np.ndarray) -> None:
        """Every step's Shares.add in closed form: each request's lengths over the steps it
        runs after are a run of consecutive integers."""
        lane, S, n0 = self.lane, self.S, self.n0
        a = lane.alloc
        bs = a.block_size
        base, l0, kv = self.base[:J], self.l0[:J], self.kv[:J]
        first = base + (np.arange(J) < n0)
        cnt = np.maximum(0, np.minimum(self.fin[:J] - 1, end) - first + 1)
        lf = l0 + (first - base)
        ll = lf + cnt - 1
        used = int(((lf + ll) * cnt).sum()) // 2
        h1, t1 = block_sums(ll, bs)
        h0, t0 = block_sums(lf - 1, bs)
        if a.contiguous:
            held = self.held[:J]
            allocated = int(held @ cnt)
            internal = int(np.maximum(0, held - kv) @ cnt)
        else:
            allocated = bs * (h1 - h0)
            last = -(-kv // bs)
            inside = np.maximum(0, ll - np.maximum(lf, (last - 1) * bs + 1) + 1)
            internal = int((last * bs - kv) @ inside)
        W = end - S
        acc = lane.shares.every
        acc["steps"] += W
        for key, v in (("used", used), ("reserved", allocated - used - internal),
                       ("internal", internal), ("free", W * lane.capacity - allocated),
                       ("tail", t1 - t0)):
            acc[key] += v
        if a.contiguous:  # efi is constant between steps that place or free
            val, prev = self.efi0, S
            for s, v in self.efi:
                acc["efi"] = add_repeated(acc["efi"], val, s - 1 - prev)
                prev, val = s - 1, v
            acc["efi"] = add_repeated(acc["efi"], val, end - prev)


def efi_of(a) -> float:
    """The external fragmentation index as Lane._fill reads it (a contiguous allocator)."""
    return a.efi()
