"""The step loop: a lane advances on its own clock (arrivals by step) or by one step at a
time the caller times (a live collector), stopping before the event columns could overflow.
Each function here is an entry point Python calls with the Pool and Requests tuples; it
hands the rule their records (records.py) and, last, publishes the running requests' token
counts into Requests (scheduler.publish).
"""
from __future__ import annotations

from numba import njit

from kvviz.engine.rule.events import log_held, room
from kvviz.engine.rule.records import records
from kvviz.engine.rule.scheduler import num_waiting, publish, schedule, step, update
from kvviz.engine.rule.shares import account
from kvviz.engine.rule.state import (
    ARRIVED,
    DONE,
    NUM_RUNNING,
    PRESSURE,
    REJECTED,
    STEP,
)

FULL, DONE_OR_UNTIL = 1, 0  # advance's answers: the event columns need room / it stopped


@njit(cache=True)
def clock(cfg, step_no):
    """The simulated time of a step (kvviz.engine.simulation.Simulation._clock)."""
    return step_no * cfg.step_ms / 1000.0


@njit(cache=True, nogil=True)  # lanes run side by side in threads (Simulation.run)
def advance(p, cfg, req, until_step):
    """Step until every request finished or rejected, or step `until_step`. Arrivals: a
    request arrives at the first step whose clock reaches its arrival time; while nothing
    runs or waits, the idle steps up to the next arrival are added at once (no event, equal
    shares). Returns FULL when the event log needs room first."""
    pool, conf, reqs = records(p, cfg, req)
    answer = _advance(pool, conf, reqs, until_step)
    publish(pool, reqs)
    return answer


@njit(cache=True)
def _advance(p, cfg, req, until_step):
    c = p.c
    while c[DONE] + c[REJECTED] < cfg.n and c[STEP] < until_step:
        if not room(p, cfg):
            return FULL
        if c[NUM_RUNNING] == 0 and num_waiting(p) == 0 and c[ARRIVED] < cfg.n:
            idle = min(req.arrival_step[c[ARRIVED]] - 1, until_step) - c[STEP]
            if idle > 0:
                c[STEP] += idle
                account(p, cfg, req, False, idle, clock(cfg, c[STEP]))
                log_held(p, cfg)
                continue
        now = c[STEP] + 1
        while c[ARRIVED] < cfg.n and req.arrival_step[c[ARRIVED]] <= now:
            c[ARRIVED] += 1
        step(p, cfg, req, clock(cfg, now))
        log_held(p, cfg)
    return DONE_OR_UNTIL


@njit(cache=True)
def step_at(p, cfg, req, arrived, time_s):
    """One step at the caller's clock, `arrived` requests arrived (a live collector).
    Returns FULL (nothing done) when the event log needs room first."""
    pool, conf, reqs = records(p, cfg, req)
    if not room(pool, conf):
        return FULL
    pool.c[ARRIVED] = max(pool.c[ARRIVED], arrived)
    step(pool, conf, reqs, time_s)
    publish(pool, reqs)
    return DONE_OR_UNTIL


@njit(cache=True)
def schedule_at(p, cfg, req, arrived, time_s):
    """step_at's first half (real mode: the KV executor writes the plan before update):
    arrivals and schedule(). Returns FULL (nothing done) when the event log needs room."""
    pool, conf, reqs = records(p, cfg, req)
    if not room(pool, conf):
        return FULL
    pool.c[ARRIVED] = max(pool.c[ARRIVED], arrived)
    pool.c[STEP] += 1
    pool.c[PRESSURE] = schedule(pool, conf, reqs, time_s)
    publish(pool, reqs)
    return DONE_OR_UNTIL


@njit(cache=True)
def finish_step(p, cfg, req, time_s):
    """step_at's second half: update() and the step's shares."""
    pool, conf, reqs = records(p, cfg, req)
    update(pool, conf, reqs, time_s)
    account(pool, conf, reqs, pool.c[PRESSURE] != 0, 1, time_s)
    publish(pool, reqs)


@njit(cache=True)
def skip_idle(p, cfg, req, k, time_s):
    """k idle steps at once (nothing runs or waits), the last at `time_s`."""
    pool, conf, reqs = records(p, cfg, req)
    pool.c[STEP] += k
    account(pool, conf, reqs, False, k, time_s)
