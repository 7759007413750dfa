"""The jumping engine: many quiet steps at once, with exactly the step engine's results.

A lane's step is *quiet* when it logs no event: nobody is admitted, rejected, refused anew,
preempted, finished or evicted. After a quiet step nothing the scheduler looks at changes
until the next event, except that every running sequence writes one token per step (and, in
a paged lane, opens a new block every block_size tokens). So the steps that follow replay the
quiet one until the earliest of:

  a sequence finishing            (its remaining tokens run out)
  an arrival, when nobody waits   (the first step whose clock passes the next arrival)
  a contiguous range full         (an append would have to grow the range)
  a paged pool running short      (the blocks the span needs exceed the free blocks)
  the scheduler changing answer   (free blocks fall below the head's need, or below the
                                   head's need plus the watermark: POLICY turns CAPACITY)
  max_steps                       (the caller samples there)

`quiet_steps` finds that horizon, `advance` applies the span: one grow_many call for the
tokens and blocks, the share sums in closed form (used grows linearly, held memory
stepwise), then the next step runs through Lane.step as usual. A real-mode lane, or a
prefix-caching lane whose workload shares prefixes (blocks shared, cached and evicted), does
not jump: it steps as before. See docs/ARCHITECTURE.md, "The jumping engine".
"""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from kvviz.engine.events import MAX_STEP, EventLog
from kvviz.engine.lane import Lane
from kvviz.engine.shares import add_repeated
from kvviz.errors import KvvizError

if TYPE_CHECKING:
    from kvviz.engine.simulation import Simulation

ENGINES = ("jump", "step")


def lane_can_jump(lane: Lane) -> bool:
    """Lane kinds the equivalence property test covers, in sim mode: contiguous, paged
    without prefix caching, and paged with prefix caching while nothing can be shared (no
    request of the workload names a prefix group, nothing cached: a plain paged lane)."""
    if lane.kv is not None:
        return False
    if not lane.spec.prefix_caching:
        return True
    if getattr(lane, "_chains", None) is not None:  # requests carry hash chains: may share
        return False
    groups = getattr(lane.w, "prefix_group", None)  # the prefix model of this workload
    u = lane.alloc.usage()
    return (groups is not None and bool((groups < 0).all()) and u.cached_tokens == 0
            and not u.evictions)


def _block_sums(x: np.ndarray, b: int) -> tuple[int, int]:
    """Over y = 1..x, summed over the elements of x: (sum of ceil(y / b), the blocks held,
    and sum of (-y) mod b, the unwritten slots of the last block)."""
    q, r = np.divmod(x, b)
    sq, sr, qq, rq, rr = int(q.sum()), int(r.sum()), int(q @ q), int(r @ q), int(r @ r)
    return (b * (qq + sq) // 2 + rq + sr,
            sq * (b * (b - 1) // 2) + b * sr - (rr + sr) // 2)


def _free_floor(lane: Lane, free_blocks: int) -> int:
    """The fewest free blocks that keep the scheduler's answer to the head unchanged."""
    if not lane.waiting_count:
        return 0
    rid = lane.front[0] if lane.front else lane.next_new
    bs = lane.alloc.block_size
    need = -(-int(lane.w.prompt[rid] + lane.generated[rid]) // bs)
    marks = [need]
    if lane.cfg.watermark > 0 and lane.reserve is None and lane.run_ids.size:
        marks.append(need + -(-int(lane.cfg.watermark * lane.capacity) // bs))
    return max([0, *(m for m in marks if free_blocks >= m)])


def quiet_steps(lane: Lane, limit: int) -> int:
    """How many steps after a quiet step replay it (<= limit): each writes one token per
    running sequence and changes nothing else the scheduler reads."""
    n = lane.run_ids.size
    m = limit if not n else min(limit, int(lane.run_rem.min()) - 1)
    if m <= 0 or not n:
        return max(m, 0)
    a, lens = lane.alloc, lane.run_len
    if a.contiguous:
        held = a.seq_allocated_tokens(lane.run_ids)
        return max(0, min(m, int((held - lens).min())))
    bs = a.block_size
    u = a.usage()  # paged lanes reserve nothing: each sequence holds ceil(len / bs) blocks
    free = u.free_tokens // bs
    budget = free - _free_floor(lane, free)
    base = u.allocated_tokens // bs

    def fits(j: int) -> bool:
        return int((-(-(lens + j) // bs)).sum()) - base <= budget

    if fits(m):
        return m
    lo, hi = 0, m  # fits(lo), not fits(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def advance(lane: Lane, m: int, pressure: bool, time_s: float) -> None:
    """Apply m quiet steps to the lane; `pressure`: the quiet step was a memory-pressure
    step (so is each replay). Costs O(running sequences + blocks taken)."""
    a, ids = lane.alloc, lane.run_ids
    n, bs = int(ids.size), a.block_size
    u = a.usage()
    lens, total = lane.run_len, lane.run_len + lane.run_rem
    used = m * u.used_tokens + n * m * (m + 1) // 2
    held_end, tail_end = _block_sums(lens + m, bs)
    held_start, tail_start = _block_sums(lens, bs)
    if a.contiguous:
        allocated = m * u.allocated_tokens
        internal = m * int(np.maximum(0, a.seq_allocated_tokens(ids) - total).sum())
    else:
        grown = held_end - held_start - m * (u.allocated_tokens // bs)
        allocated = m * u.allocated_tokens + bs * grown
        last = -(-total // bs)  # the block that holds the final token
        first = np.maximum(lens, (last - 1) * bs)  # length where that block is reached
        inside = np.minimum(np.maximum(lens + m - first, 0), m)
        internal = int((last * bs - total) @ inside)
    tail = tail_end - tail_start
    free = m * lane.capacity - allocated
    efi = 0.0
    if a.contiguous and u.free_tokens > 0:
        efi = 1.0 - a.check(1).largest_hole_tokens / u.free_tokens
    sums = {"used": used, "reserved": allocated - used - internal, "internal": internal,
            "free": free, "tail": tail}
    sh = lane.shares
    for acc in ((sh.pressure, sh.every) if pressure else (sh.every,)):
        acc["steps"] += m
        for k, v in sums.items():
            acc[k] += v
        acc["efi"] = add_repeated(acc["efi"], efi, m)
    if n:
        a.grow_many(ids, m)
        lane.run_len = lens + m
        lane.run_rem = lane.run_rem - m
    lane.tokens_generated += n * m
    lane.step_no += m
    lane.time_s = time_s


def next_arrival_step(arrival_s: np.ndarray, arrived: int, step_no: int,
                      step_ms: float) -> int | None:
    """The first step after step_no whose clock (step * step_ms / 1000, the step engine's
    own arithmetic) reaches request `arrived`; None when every request has arrived."""
    if arrived >= arrival_s.size:
        return None
    a = float(arrival_s[arrived])
    try:
        t = max(step_no + 1, int(np.ceil(a * 1000.0 / step_ms)) - 2)
    except OverflowError:
        t = MAX_STEP + 1
    if t > MAX_STEP:
        raise KvvizError(f"the next request arrives at {a:g} s, more than {MAX_STEP} engine "
                         f"steps of {step_ms:g} ms away: lower its arrival time or raise the "
                         "rate")
    while t * step_ms / 1000.0 < a:
        t += max(1, t >> 52)  # past 2^53 a float clock cannot tell t from t + 1
    return t


FAR = 1 << 62
MIN_SPAN = 3  # quiet steps worth a jump; a jump costs about as much as two plain steps


def run_lane(lane: Lane, arrival_s: np.ndarray, step_ms: float, stop: int | None,
             tick: Callable[[], None] | None = None) -> None:
    """Drive one lane to the end (or to step `stop`): Lane.step at events, `advance` over
    the quiet spans between them. A step is replayable when it logged no event, or when
    nobody waits after it (then the scheduler has nothing to do until the next arrival).
    `tick` is called every 256 Lane.step calls (progress)."""
    jumps = lane_can_jump(lane)  # fixed for the run: no prefix group, nothing ever shared
    calls = 0
    while not lane.finished and (stop is None or lane.step_no < stop):
        calls += 1
        if tick is not None and calls % 256 == 0:
            tick()
        now = (lane.step_no + 1) * step_ms / 1000.0
        logged, pressed = len(lane.events), lane.shares.pressure_steps
        lane.arrive(int(np.searchsorted(arrival_s, now, side="right")))
        lane.step(now)
        quiet = len(lane.events) == logged
        if lane.finished or not (quiet or lane.waiting_count == 0) or not jumps:
            continue
        limit = FAR if stop is None else stop - lane.step_no
        # An arrival matters only when nobody waits: behind a refused head it joins the
        # queue and changes nothing the scheduler decides (the next Lane.step counts it in).
        nxt = None
        if lane.waiting_count == 0:
            nxt = next_arrival_step(arrival_s, lane.arrived, lane.step_no, step_ms)
        if nxt is not None:
            limit = min(limit, nxt - lane.step_no - 1)
        m = quiet_steps(lane, limit) if limit > 0 else 0
        if MIN_SPAN <= m < FAR:  # shorter spans: plain steps cost less than a jump
            pressure = quiet and lane.shares.pressure_steps > pressed
            advance(lane, m, pressure, (lane.step_no + m) * step_ms / 1000.0)


def run_jumping(sim: Simulation, max_steps: int | None,
                progress: Callable[[int, int], None] | None) -> None:
    """Simulation.run for the jumping engine: each lane runs on its own (lanes share only the
    request stream), logging into a private event log; the logs are then merged in the step
    engine's order (by step, then lane). Real-mode lanes step together, as before. A run
    to the end (no max_steps) takes the lean lane where it covers the lane
    (kvviz/engine/lean): nobody samples its block maps."""
    from kvviz.engine.lean import lane_can_lean, run_lean  # lean builds on this module
    total = len(sim.workload)
    if any(x.kv is not None for x in sim.lanes):
        while not sim.finished and (max_steps is None or sim.step_no < max_steps):
            sim.step()
            if progress is not None and sim.step_no % 256 == 0:
                progress(min(x.done + x.rejected for x in sim.lanes), total)
        return
    shared = sim.events
    parts = []

    def tick() -> None:  # lanes run one after another: report their mean progress
        progress(sum(x.done + x.rejected for x in sim.lanes) // len(sim.lanes), total)

    for pos, lane in enumerate(sim.lanes):
        if lane.finished:
            continue
        own = EventLog()
        own.lanes = list(shared.lanes)
        lane.events = own
        t0 = time.perf_counter()
        try:
            if max_steps is None and lane_can_lean(lane):
                cols = run_lean(lane, sim._arrival, sim.engine.step_ms, None,
                                None if progress is None else tick)
            else:
                run_lane(lane, sim._arrival, sim.engine.step_ms, max_steps,
                         None if progress is None else tick)
                cols = own.since(0)[0]
        finally:
            lane.events = shared
            lane.wall_seconds += time.perf_counter() - t0
        parts.append((cols, pos))
        sim.step_no = max(sim.step_no, lane.step_no)
        if progress is not None:
            tick()
    if parts:
        pos = np.concatenate([np.full(len(c), p, np.int64) for c, p in parts])
        step = np.concatenate([c["step"] for c, _ in parts])
        order = np.lexsort((np.arange(pos.size), pos, step))
        del pos, step
        shared.merge([c for c, _ in parts], order)
