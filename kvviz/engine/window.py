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

from kvviz.engine.closedform import arrival_steps
from kvviz.engine.seats import seat_refusals, seat_steps
from kvviz.engine.windowplan import MIN_WINDOW, Plan

if TYPE_CHECKING:
    from kvviz.engine.lane import Lane

ARRIVALS = 1024  # arrivals one window plans over


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
    steps = steps[:y.size]  # `asked` keeps the request after them: it may be refused
    p = w.prompt[y].astype(np.int64)
    fin = np.concatenate([fin_x, steps + lasts[:y.size]])
    if hi == total:
        end = min(end, int(fin.max()))
    done = np.sort(fin)

    def running(s: np.ndarray) -> np.ndarray:  # running when step s schedules
        return n0 + np.searchsorted(steps, s, "left") - np.searchsorted(done, s, "left")

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
    refused = seat_refusals(lane, ye, arrive.size, steps, asked, running, p, end)
    end = min(end, refused[0])
    if sched.caching and refused[1][0].size:  # a refusal names its need net of its hits:
        hit = sched.space.may_hit(refused[1][1])  # the step looks them up
        if hit.any():
            end = min(end, int(refused[1][0][np.argmax(hit)]) - 1)
    if a.contiguous and refused[2][0].size:  # its refusals name its ranges: step them
        end = min(end, int(refused[2][0].min()) - 1)
    if end - S < MIN_WINDOW:
        return 0
    plan = Plan(lane, ids, c, y, p, steps, fin, run_y + slot == 0, refused[1:])
    end = plan.memory(end) if not lane.alloc.contiguous else plan.place(end)
    if end <= S:
        return 0
    plan.commit(end, step_ms, arrival_s)
    return end - S
