"""Applying a window (kvviz/engine/window.py): its requests' memory in execution order, then
the scheduler's state, the lane's counters, events and shares after its last step.

A paged lane's takes, fills, admissions and frees are checked against the free count they
leave and replayed on the free queue (`PagedAllocator.replay_window`); a contiguous lane's
admissions and releases run on the real placement. Events and shares are written in closed
form, as Lane.step would write them step by step.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from kvviz.engine.closedform import block_sums, every_multiple
from kvviz.engine.eventlog import KIND_CODE, REASON_CODE, EventColumns
from kvviz.engine.shares import add_repeated

if TYPE_CHECKING:
    from kvviz.engine.lane import Lane

EMPTY = np.zeros(0, np.int64)
MIN_WINDOW = 2  # shorter windows: a plain step costs less


class Plan:
    """One window's requests: the running ones (X), then the arrivals (Y), in the rule's
    running order."""

    def __init__(self, lane: Lane, ids, c, y, p, steps, fin, empty, refused) -> None:
        self.lane, self.y, self.p, self.steps, self.empty = lane, y, p, steps, empty
        self.fails, self.waits = refused  # (steps, requests): seat refusals, events / all
        self.fail_free = np.zeros(self.fails[0].size, np.int64)  # free tokens at each event
        self.n0, self.S = int(ids.size), lane.step_no
        self.jid = np.concatenate([ids, y])
        self.fin = fin
        self.base = np.concatenate([np.full(ids.size, self.S, np.int64), steps])
        self.l0 = np.concatenate([c, p])  # tokens computed after step `base`
        self.kv = lane.kv_final[self.jid]
        self.free_after: list[int] = []  # free tokens after each admission
        self.evicted = EMPTY  # per evicted block, the step that evicted it
        self.efi: list[tuple[int, float]] = []  # (step, efi from it on), contiguous lanes
        self.efi0 = _efi(lane.alloc) if lane.alloc.contiguous else 0.0
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
        who, tstep, idx = every_multiple(l0, kv - 1, bs, base - l0 + 1, end)  # L % bs == 0: a take
        parts = [(tstep, who, np.ones(who.size, np.int64))]
        if space.keys is not None:  # L+1 % bs == 0: a block filled, its key cached
            fw, fstep, fidx = every_multiple(l0 + 1, kv, bs, base - l0, end)
            parts.append((fstep, fw, fidx // bs - 1))
        else:
            parts.append((EMPTY, EMPTY, EMPTY))
        fj = np.flatnonzero(fin <= end)
        parts += [(self.steps[:ny], np.arange(n0, J), self.p[:ny]), (fin[fj], fj, kv[fj])]
        step = np.concatenate([x[0] for x in parts])
        phase = np.repeat(np.arange(4), [x[0].size for x in parts])
        j = np.concatenate([x[1] for x in parts])
        arg = np.concatenate([x[2] for x in parts])
        order = np.argsort((step * 4 + phase) * J + j)  # (step, phase, j): unique keys
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
        if self.fails[0].size:  # free blocks when each head is refused: after the step's
            self.fail_free = self._free_at(self.fails[0], step, phase, d) * bs  # takes and
            # admissions, before its frees (commit keeps those up to the window's end)
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
                    efi.append((cur, _efi(a)))
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
            efi.append((cur, _efi(a)))
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
        self.fail_free = self.fail_free[keep]
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


def _efi(a) -> float:
    """The external fragmentation index as Lane._fill reads it (a contiguous allocator)."""
    return a.efi()
