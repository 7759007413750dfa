"""Queue windows: a contiguous lane's steps while requests wait, asked only where it matters.

A running request of a contiguous lane writes inside its reservation, so its memory changes
only when a request is admitted or finishes, and nobody is ever preempted. While every
running request decodes and someone waits, a step therefore decides exactly what the step
before it decided (no admission; the head refused for the same reason, so no new event)
unless that step rejected or finished a request, admitted one and then refused the head for
POLICY (max_num_seqs; without chunked prefill, a budget that grows as prompts become
decodes), or left the head waiting for the budget alone. (A step that admitted and then
refused the head for memory decides the next step's answer too: the next step sees the same
free ranges and running count, and a budget no smaller, since the prompts it admitted
become single decodes; `_answer` checks memory on the whole sequence, so the budget cannot
turn that refusal into an admission.) Arrivals only join the queue. A finish frees its
range in its step's update, after that step's admissions: the step after it is the one
asked.
`queue_window` asks the rule at those steps only (`Scheduler.admissions`: the scheduler's
own `_admit`, on the real placement), logs with Lane's own `log_schedule` / `log_finished`
(into an EventBuffer, appended to the lane's log when the window ends), frees each finished
request in its step's update, and adds the steps in between (each a decode of every running
request) with their shares in closed form. A prompt admitted in chunks ends the window (it
does not decode), and so does a request whose life outgrows its reservation (its range must
grow), and so does a step after which nobody waits (windows, kvviz/engine/window.py, take
the arrivals from there, many at once).
Checked against stepping by tests/engine/test_span_equivalence.py.
"""
from __future__ import annotations

from heapq import heapify, heappop, heappush
from typing import TYPE_CHECKING

import numpy as np

from kvviz.alloc.base import Reason
from kvviz.engine.eventbuffer import EventBuffer

if TYPE_CHECKING:
    from kvviz.engine.lane import Lane

LIMIT = 1 << 20  # steps per window (bounds its per-step share arrays)
NEVER = 1 << 62
POLICY = Reason.POLICY


def queue_window(lane: Lane, arrival_s: np.ndarray, step_ms: float, stop: int | None) -> int:
    """Apply the queue window that starts after the lane's last step; returns its steps."""
    sched, a = lane.sched, lane.alloc
    if not a.contiguous or a.block_size != 1 or not sched.waiting_count or sched.front:
        return 0
    ids = sched.running_ids()
    if not sched.decodes_fit(ids.size) or (
            sched.num_tokens[ids] - sched.computed[ids] != 1).any():
        return 0
    held = a.seq_allocated_tokens(ids)
    if (held < lane.kv_final[ids]).any():  # a range that grows past its reservation
        return 0
    S = lane.step_no
    end = S + LIMIT if stop is None else min(stop, S + LIMIT)
    # per request: base step, tokens computed after it, sampled after it, sampled before
    # the window, finish step, reserved slots, slots the allocator holds as written
    rows: dict[int, list[int]] = {}
    for r, c, g, h, f in zip(ids.tolist(), sched.computed[ids].tolist(),
                             sched.generated[ids].tolist(), held.tolist(),
                             sched.finish_steps(S, ids, True).tolist()):
        rows[r] = [S, c, g, g, f, h, c]
    log, lane.events = lane.events, EventBuffer(lane.events)  # the lane logs as it steps
    try:
        end, segs = _steps(lane, rows, end, arrival_s, step_ms)
    finally:
        lane.events.flush()
        lane.events = log
    if end == S:
        return 0
    _commit(lane, rows, segs, end, step_ms, arrival_s)
    return end - S


def _steps(lane: Lane, rows: dict, end: int, arrival_s: np.ndarray,
           step_ms: float) -> tuple[int, list]:
    """The window's asked steps and finishes up to step `end` at most (rows: the touched
    requests, updated); returns the window's last step and its segments."""
    sched, a = lane.sched, lane.alloc
    kvf, space = lane.kv_final, sched.space
    heap = [(x[4], r) for r, x in rows.items()]  # (finish step, request)
    heapify(heap)
    segs: list[tuple[int, bool, float]] = []  # (step, pressure, efi) from that step on
    s, changed, total, efi, pressure = lane.step_no, True, len(lane.w), None, False
    n_arr = arrival_s.size
    efi_now = a.efi  # as Lane._fill reads it
    known, finish_at, held_of = sched.num_tokens, sched.finish_steps, a.seq_held_tokens
    admissions, budget_after = sched.admissions, sched.budget_after_decodes
    # the next arrival's time (inf: none left), read again only when requests arrive
    t_next = float(arrival_s[sched.arrived]) if sched.arrived < n_arr else np.inf
    while lane.done + lane.rejected < total:  # someone waits
        if changed:
            nxt = s + 1
        elif heap:
            nxt = heap[0][0]
        else:
            break
        if nxt > end:
            s = end
            break
        s = nxt
        time_s = lane.time_s = s * step_ms / 1000.0
        lane.step_no = s
        if t_next <= time_s:
            sched.arrived = int(np.searchsorted(arrival_s, time_s, side="right"))
            t_next = float(arrival_s[sched.arrived]) if sched.arrived < n_arr else np.inf
        # a step that is not asked decides what the step before decided (no event)
        ask, last = changed, False  # last: this step ends the window
        if ask:
            plan = admissions(budget_after(len(sched.running)))
            lane.log_schedule(plan)
            if plan.admitted:  # a prompt admitted in chunks (the running ones all decode)
                lane.log_partial(np.asarray(plan.admitted, np.int64))
            pressure = plan.pressure
            if plan.admitted:
                for r, n, h in zip(plan.admitted, plan.counts.tolist(), plan.hit_tokens):
                    whole = h + n == int(known[r])
                    f = int(finish_at(s, r, False)) if whole else NEVER
                    size = held_of(r)
                    last |= not whole or size < kvf[r]  # chunks, or growth past the range
                    rows[r] = [s, h + n, int(whole), 0, f, size, h + n]
                    heappush(heap, (f, r))
        if heap and heap[0][0] == s:
            fins = [heappop(heap)[1]]
            while heap and heap[0][0] == s:
                fins.append(heappop(heap)[1])
            if len(fins) > 1:  # update() finishes them in running order
                fins.sort(key=sched.running.index)
            for r in fins:  # (its last decodes, never written to the allocator, are
                space.free(r)  # released with it)
                space.done(r)
                sched.running.remove(r)
            sched._ids = None
            lane.log_finished(np.asarray(fins, np.int64))
        else:
            fins = None
        if (ask and plan.admitted) or fins or efi is None:  # efi changes where ranges do
            efi = efi_now()
        if not segs or segs[-1][1] != pressure or segs[-1][2] != efi:
            segs.append((s, pressure, efi))
        if last or not sched.waiting_count:  # nobody waits: windows take arrivals in bulk
            break
        # whether the next step may decide otherwise (see the module's docstring)
        changed = bool(fins) or ask and (bool(plan.rejected) or plan.refused is None or (
            bool(plan.admitted) and plan.refused[1].reason is POLICY))
    return s, segs


def _commit(lane: Lane, rows: dict, segs: list, end: int, step_ms: float,
            arrival_s: np.ndarray) -> None:
    """The touched requests' state and the lane's shares after step `end`."""
    sched, a = lane.sched, lane.alloc
    S = segs[0][0] - 1
    W = end - S
    r = np.fromiter(rows, np.int64, len(rows))
    base, l0, g0, gs, fin, held, alen = np.array(list(rows.values()), np.int64).reshape(-1, 7).T
    kv = lane.kv_final[r]
    live = fin > end
    dec = live & (fin < (1 << 62))
    comp = np.where(live, l0 + (end - base), kv)
    comp[live & ~dec] = l0[live & ~dec]
    gen = np.where(live, g0 + np.where(dec, end - base, 0), lane.w.output[r])
    sched.computed[r] = comp
    sched.num_tokens[r[dec | ~live]] = comp[dec | ~live] + 1
    sched.generated[r] = gen
    lane.tokens_generated += int((gen - gs).sum())
    if dec.any():
        a.grow_each(r[dec], (comp - alen)[dec])
    sched.arrived = max(sched.arrived, int(np.searchsorted(
        arrival_s, end * step_ms / 1000.0, side="right")))
    lane.step_no, lane.time_s = end, end * step_ms / 1000.0
    lane._memory_pressure = False
    # request i counts at the window's steps t = first_i..last_i (step S + t), with lengths
    # c_i + t there; a step's pressure is its segment's
    first = np.where(base == S, S + 1, base) - S
    last = np.minimum(fin - 1, end) - S
    keep = last >= first
    first, last = first[keep], last[keep]
    c = (l0 - base + S)[keep]
    held, internal = held[keep], np.maximum(0, held - kv)[keep]
    # the segments tile the window's steps 1..W: lo_k..hi_k, with their pressure and efi
    at = np.fromiter((x[0] for x in segs), np.int64, len(segs)) - S
    lo, hi = at, np.append(at[1:] - 1, W)
    span, tri = hi - lo + 1, (lo + hi) * (hi - lo + 1) // 2  # steps, and their sum
    flags = np.fromiter((x[1] for x in segs), np.bool_, len(segs))
    efis = np.fromiter((x[2] for x in segs), np.float64, len(segs))
    for acc, on in ((lane.shares.every, np.ones(len(segs), np.bool_)),
                    (lane.shares.pressure, flags)):
        steps = int(span[on].sum())
        if not steps:
            continue
        below = (np.concatenate([[0], np.cumsum(np.where(on, span, 0))]),
                 np.concatenate([[0], np.cumsum(np.where(on, tri, 0))]))
        n1, t1 = _upto(last, lo, on, below)
        n0, t0 = _upto(first - 1, lo, on, below)
        n = n1 - n0
        used = int(c @ n) + int((t1 - t0).sum())
        alloc, inside = int(held @ n), int(internal @ n)
        acc["steps"] += steps
        for k, v in (("used", used), ("reserved", alloc - used - inside),
                     ("internal", inside), ("free", steps * lane.capacity - alloc)):
            acc[k] += v
        # efi: its steps' values added one by one (cumsum adds in order, as stepping does;
        # adding 0.0 changes nothing)
        nz = on & (efis != 0.0)
        acc["efi"] = float(np.cumsum(np.concatenate([[acc["efi"]],
                                                     np.repeat(efis[nz], span[nz])]))[-1])


def _upto(x: np.ndarray, lo: np.ndarray, on: np.ndarray,
          below: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Per x (0..W): how many of the counted steps 1..x there are, and their sum, given the
    segments' first steps `lo` (tiling 1..W), which are counted (`on`), and the counts and
    sums of the counted steps before each segment (`below`)."""
    k = np.maximum(np.searchsorted(lo, x, "right") - 1, 0)
    m = np.where(on[k] & (x >= lo[k]), x - lo[k] + 1, 0)
    return below[0][k] + m, below[1][k] + (2 * lo[k] + m - 1) * m // 2
