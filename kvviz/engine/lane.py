"""One lane: an allocator layout under the scheduling rule, compiled (kvviz/engine/rule).

Python builds the lane's state once (struct-of-arrays, rule/state.py), then asks the rule to
advance (a whole run in one call, or one step at a time for a live collector or real mode)
and reads the arrays: counters, the step's plan, block tables, the event columns, the
shares. Requests are indices into the Workload.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple, Protocol

import numpy as np

from kvviz.core.admission import Admission, Reason
from kvviz.core.blockmap import BlockMap
from kvviz.core.config import EngineConfig, LaneSpec
from kvviz.core.workload import Workload
from kvviz.engine.eventlog import DTYPES, EventColumns
from kvviz.engine.rule import build
from kvviz.engine.rule import state as S
from kvviz.engine.rule.advance import (
    FULL,
    advance,
    finish_step,
    schedule_at,
    skip_idle,
    step_at,
)
from kvviz.engine.rule.events import kv_bound
from kvviz.engine.rule.view import KVView
from kvviz.engine.shares import Shares

NO_LIMIT = 2**63 - 1
REASONS = ("CAPACITY", "FRAGMENTATION", "POLICY")


class KVExecutor(Protocol):
    """Real mode: writes K/V and runs attention for what the scheduler decided."""

    def on_admit(self, seq_ids: list[int], num_tokens: list[int],
                 starts: list[int] | None = None) -> None: ...
    def on_decode(self, seq_ids: np.ndarray, lens: np.ndarray) -> None: ...


class Plan(NamedTuple):
    """What the last step's schedule() decided, in vLLM's order: running requests, then
    admissions (the per-step view of vLLM's num_scheduled_tokens)."""

    ids: np.ndarray  # requests that compute this step
    starts: np.ndarray  # tokens each had computed before the step
    counts: np.ndarray  # tokens each computes now
    admitted: list[int]  # among ids, newly running (new or resumed)
    hit_tokens: list[int]  # per admitted request: tokens served by cached blocks
    preempted: list[int]
    refused: tuple[int, Admission] | None  # the head that had to wait, and why
    pressure: bool  # a preemption, or the head refused for memory


class Lane:
    def __init__(self, name: str, spec: LaneSpec, workload: Workload, engine: EngineConfig,
                 capacity_tokens: int, bytes_per_token: int = 0,
                 steps: np.ndarray | None = None, kv_factory=None) -> None:
        self.name, self.spec, self.w, self.engine = name, spec, workload, engine
        self.bytes_per_token = bytes_per_token
        self.cfg, self.req, self.pool = build.build(spec, workload, engine, capacity_tokens,
                                                    steps)
        self.capacity = self.cfg.capacity
        self.final_len = workload.final_len
        self.wall_seconds = 0.0
        self._n = len(workload)
        self.alloc = KVView(self)  # what RealKV, the collector and the publisher read
        self.kv = kv_factory(self.alloc) if kv_factory is not None else None
        # called between schedule() and update() of each step (tests, observers)
        self.after_schedule: Callable[[Lane], None] | None = None
        self._upto = 0

    # ---- driving --------------------------------------------------------------------------
    def run(self, until_step: int | None = None) -> None:
        """Step on the lane's own clock until it finishes (or reaches `until_step`)."""
        until = NO_LIMIT if until_step is None else until_step
        while advance(self.pool, self.cfg, self.req, until) == FULL:
            self.grow_events()

    def step_at(self, arrived: int, time_s: float) -> None:
        """One step at the caller's clock with `arrived` requests arrived; in real mode the
        KV executor writes (and attends) what schedule() decided before update()."""
        t = float(time_s)
        if self.kv is None and self.after_schedule is None:
            while step_at(self.pool, self.cfg, self.req, arrived, t) == FULL:
                self.grow_events()
            return
        while schedule_at(self.pool, self.cfg, self.req, arrived, t) == FULL:
            self.grow_events()
        if self.after_schedule is not None:
            self.after_schedule(self)
        ids, starts, counts = self.scheduled()
        if ids.size and self.kv is not None:
            decode = (counts == 1) & (starts + 1 == self.req.num_tokens[ids])
            pre = ~decode
            if pre.any():
                self.kv.on_admit(ids[pre].tolist(), counts[pre].tolist(),
                                 starts[pre].tolist())
            if decode.any():
                self.kv.on_decode(ids[decode], starts[decode] + 1)
        finish_step(self.pool, self.cfg, self.req, t)

    def arrive(self, upto: int) -> None:
        """The first `upto` requests have arrived (for `step`)."""
        self._upto = max(self._upto, upto)

    def step(self, time_s: float) -> None:
        """One step at `time_s` with the requests `arrive` let in."""
        self.step_at(self._upto, time_s)

    def skip_idle(self, k: int, last_time_s: float) -> None:
        """k idle steps (the last at `last_time_s`): no event, k equal steps of shares."""
        skip_idle(self.pool, self.cfg, self.req, k, float(last_time_s))

    def grow_events(self) -> None:
        """Room for one more step in every log that is on (advance answered FULL)."""
        p, n = self.pool, int(self.pool.c[S.NUM_EVENTS])
        admissions = min(self.cfg.max_num_seqs, p.running.size)
        bound = 3 * int(p.c[S.NUM_RUNNING]) + 2 * admissions + int(
            p.c[S.TOO_BIG_LEFT]) + 2  # events.step_bound
        fresh = {}
        if p.ev_step.size - n < bound:
            fresh.update(build.kept(build.events(max(2 * p.ev_step.size, n + bound)), p, n))
        if p.c[S.KV_LOG_ON]:
            k = int(p.c[S.NUM_KV_LOG])
            fresh.update(build.kept(
                build.kv_events(max(2 * p.kv_kind.size, k + kv_bound(self.cfg))), p, k))
        if p.c[S.HELD_LOG_ON]:
            k = int(p.c[S.NUM_HELD_LOG])
            fresh.update(build.kept(build.held_log(max(2 * p.held_step.size, 1024)), p, k))
        self.pool = p._replace(**fresh)

    def log_held(self) -> None:
        """From now on `run` logs the blocks (cells) held after each step (an idle span: once,
        at its last step): `held_log()`."""
        self.pool.c[S.HELD_LOG_ON] = 1

    def held_log(self) -> tuple[np.ndarray, np.ndarray]:
        """(step, blocks held after it) for each step `run` made since `log_held`, copied;
        an idle span is one entry at its last step."""
        p, k = self.pool, int(self.pool.c[S.NUM_HELD_LOG])
        return p.held_step[:k].copy(), p.held_blocks[:k].copy()

    def drain(self, lane_code: int, lanes: tuple[str, ...] = (),
              copy: bool = True) -> EventColumns:
        """The events logged since the last drain, as this lane's columns (lane_code in a
        log whose lanes are `lanes`). copy=False: views of the lane's own columns, valid
        until the lane steps again (for a caller that copies them at once)."""
        p, n = self.pool, int(self.pool.c[S.NUM_EVENTS])
        cols = {"time_s": p.ev_time[:n], "step": p.ev_step[:n],
                "lane": np.full(n, lane_code, DTYPES["lane"]), "kind": p.ev_kind[:n],
                "seq_id": p.ev_seq[:n], "reason": p.ev_reason[:n],
                "need_tokens": p.ev_need[:n], "free_tokens": p.ev_free[:n],
                "largest_hole_tokens": p.ev_largest[:n], "count": p.ev_count[:n]}
        if copy:
            cols = {f: a.copy() if f != "lane" else a for f, a in cols.items()}
        p.c[S.NUM_EVENTS] = 0
        return EventColumns(cols, lanes)

    def hand_over_events(self) -> None:
        """The lane's event columns go to whoever took the last drain's views (which stay
        valid for good); the lane logs into fresh ones from now on."""
        self.pool = self.pool._replace(**build.events(self.pool.ev_step.size))

    # ---- counters -------------------------------------------------------------------------
    def _c(self, i: int) -> int:
        return int(self.pool.c[i])

    @property
    def step_no(self) -> int:
        return self._c(S.STEP)

    @property
    def done(self) -> int:
        return self._c(S.DONE)

    @property
    def rejected(self) -> int:
        return self._c(S.REJECTED)

    @property
    def preemptions(self) -> int:
        return self._c(S.PREEMPTIONS)

    @property
    def tokens_generated(self) -> int:
        return self._c(S.TOKENS_GENERATED)

    @property
    def arrived(self) -> int:
        """Requests arrived so far (a prefix of the workload; `arrive`'s for the next step)."""
        return max(self._c(S.ARRIVED), self._upto)

    @property
    def finished(self) -> bool:
        return self.done + self.rejected == self._n

    @property
    def waiting_count(self) -> int:
        c = self.pool.c
        return int(c[S.NUM_FRONT] + self.arrived - c[S.NEXT_NEW])

    @property
    def idle(self) -> bool:
        return not self._c(S.NUM_RUNNING) and not self.waiting_count

    @property
    def failures(self) -> dict[str, int]:
        return {k: self._c(S.FAIL_CAPACITY + i) for i, k in enumerate(REASONS)}

    @property
    def prefix_query_tokens(self) -> int:
        return self._c(S.QUERY_TOKENS)

    @property
    def prefix_hit_tokens(self) -> int:
        return self._c(S.HIT_TOKENS)

    @property
    def prefix_hit_rate(self) -> float:
        q = self.prefix_query_tokens
        return self.prefix_hit_tokens / q if q else 0.0

    @property
    def shares(self) -> Shares:
        """The lane's share sums as a Shares (kvviz/engine/shares.py)."""
        sh = Shares(self.capacity)
        keys = ("steps", "used", "reserved", "internal", "free", "tail")
        for acc, row in ((sh.every, 0), (sh.pressure, 1)):
            acc.update({k: int(v) for k, v in zip(keys, self.pool.shares[row].tolist())})
            acc["efi"] = float(self.pool.efi[row])
        return sh

    # ---- what runs ------------------------------------------------------------------------
    @property
    def run_ids(self) -> np.ndarray:
        """Running requests, in the scheduler's order."""
        return self.pool.running[:self._c(S.NUM_RUNNING)].copy()

    @property
    def run_len(self) -> np.ndarray:
        """KV slots each running request has written."""
        return self.req.num_computed_tokens[self.run_ids]

    @property
    def generated(self) -> np.ndarray:
        return self.req.num_tokens - self.req.prompt  # the tokens sampled

    def scheduled(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The last step's plan: (requests, tokens computed before, tokens computed now), in
        vLLM's order (running requests, then admissions)."""
        p, k = self.pool, self._c(S.NUM_SCHED)
        return p.sched_ids[:k].copy(), p.sched_starts[:k].copy(), p.sched_counts[:k].copy()

    @property
    def last_plan(self) -> Plan:
        p, c = self.pool, self.pool.c
        ids, starts, counts = self.scheduled()
        first = int(c[S.FIRST_ADMITTED])
        refused = None
        if c[S.REFUSED_SEQ] >= 0:
            reason = Reason(REASONS[int(c[S.REFUSED_REASON]) - 1])
            refused = (int(c[S.REFUSED_SEQ]), Admission(
                False, reason, int(c[S.REFUSED_NEED]), int(c[S.REFUSED_FREE]),
                int(c[S.REFUSED_LARGEST])))
        return Plan(ids, starts, counts, ids[first:].tolist(), starts[first:].tolist(),
                    p.preempted[:int(c[S.NUM_PREEMPTED])].tolist(), refused,
                    bool(c[S.PRESSURE]))

    def snapshot(self) -> BlockMap:
        return self.alloc.snapshot()

    def summary(self) -> dict:
        return {
            "lane": self.name,
            "allocator": self.spec.allocator,
            "block_size": self.spec.block_size,
            "steps": self.step_no,
            "finished": self.done,
            "rejected": self.rejected,
            "preemptions": self.preemptions,
            "admit_failures": {k.lower(): v for k, v in self.failures.items()},
            **self.shares.summary(),
            "tokens_generated": self.tokens_generated,
            "prefix_hit_rate": self.prefix_hit_rate,
        }
