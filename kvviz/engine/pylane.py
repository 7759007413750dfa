"""One lane: an allocator under the scheduling rule (kvviz/engine/scheduler.py).

Each step: schedule (running requests first, then admissions) -> the KV executor writes what
was computed (real mode) -> update (sample, finish) -> account (shares). The lane turns the
scheduler's decisions into events and keeps the memory shares. Requests are indices into the
Workload.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Protocol

import numpy as np

from kvviz.alloc.base import Admission, Allocator, Reason, Usage
from kvviz.core.blockmap import BlockMap
from kvviz.core.config import EngineConfig, LaneSpec
from kvviz.core.workload import Workload
from kvviz.engine.eventlog import KIND_CODE, REASON_CODE, EventLog
from kvviz.engine.kvspace import ContiguousSpace, PagedSpace
from kvviz.engine.scheduler import Scheduler
from kvviz.engine.shares import Shares
from kvviz.engine.tokens import BlockKeys


class KVExecutor(Protocol):
    """Real mode: writes K/V and runs attention for what the scheduler decided."""

    def on_admit(self, seq_ids: list[int], num_tokens: list[int],
                 starts: list[int] | None = None) -> None: ...
    def on_decode(self, seq_ids: np.ndarray, lens: np.ndarray) -> None: ...


def next_pow2(n: np.ndarray) -> np.ndarray:
    """Smallest power of two >= n, elementwise (n >= 1)."""
    n = np.maximum(np.asarray(n, np.int64), 1)
    return np.left_shift(1, np.ceil(np.log2(n)).astype(np.int64))


class Lane:
    def __init__(self, name: str, spec: LaneSpec, allocator: Allocator, workload: Workload,
                 engine: EngineConfig, events: EventLog, kv: KVExecutor | None = None) -> None:
        self.name, self.spec, self.alloc, self.w, self.cfg = name, spec, allocator, workload, engine
        self.events, self.kv = events, kv
        self._code = events.lane_code(name)
        n = self._n = len(workload)
        self.final_len = workload.final_len
        kv_final = np.maximum(workload.prompt + workload.output - 1, 1)  # last token: no slot
        if spec.allocator == "contiguous":
            self.reserve = {"max": np.full(n, engine.max_seq_len, np.int64),
                            "pow2": np.minimum(next_pow2(self.final_len), engine.max_seq_len),
                            "exact": self.final_len.copy()}[spec.reserve]
            space = ContiguousSpace(allocator, self.reserve)
            whole = np.maximum(kv_final, self.reserve)
        else:
            self.reserve = None
            caching = getattr(allocator, "prefix_caching", False)
            keys = BlockKeys(workload, allocator.block_size) if caching else None
            space = PagedSpace(allocator, keys, engine.watermark)
            whole = kv_final
        self.kv_final = kv_final
        cap = allocator.usage().capacity_tokens
        self.capacity = cap
        # requests whose whole life cannot fit even in an empty cache are rejected up front
        self.too_big = allocator.footprints(whole) > cap
        self.sched = Scheduler(workload, engine, space, self.too_big)
        self.step_no = 0
        self.time_s = 0.0
        self.done = 0
        self.rejected = 0
        self.preemptions = 0
        self.tokens_generated = 0
        self.wall_seconds = 0.0  # time spent stepping this lane
        self.failures = {r.value: 0 for r in Reason}
        self._last_fail: tuple[int, str] | None = None
        self._evictions_seen = 0
        self.shares = Shares(cap)
        self._memory_pressure = False  # this step: head refused for memory, or a preemption
        self.last_plan = None  # what the last step's schedule() decided (Scheduler.Plan)
        self._final_of: tuple = (None, None)  # (running ids, their kv_final), _paged_internal

    @property
    def finished(self) -> bool:
        return self.done + self.rejected == self._n

    # ---- what the scheduler holds, as arrays ------------------------------------------------
    @property
    def run_ids(self) -> np.ndarray:
        """Running requests, in the scheduler's order."""
        return self.sched.running_ids()

    @property
    def run_len(self) -> np.ndarray:
        """KV slots each running request has written."""
        return self.sched.computed[self.run_ids]

    @property
    def generated(self) -> np.ndarray:
        return self.sched.generated

    @property
    def waiting_count(self) -> int:
        return self.sched.waiting_count

    @property
    def prefix_query_tokens(self) -> int:
        """vLLM's prefix-cache queries: known tokens at every admission, resumed included."""
        return self.sched.query_tokens

    @property
    def prefix_hit_tokens(self) -> int:
        return self.sched.hit_tokens

    @property
    def arrived(self) -> int:
        """Requests that have arrived so far (a prefix of the workload)."""
        return self.sched.arrived

    def arrive(self, upto: int) -> None:
        self.sched.arrived = max(self.sched.arrived, upto)

    def _event(self, kind: str, seq: int, adm: Admission | None = None, count: int = 1) -> None:
        if adm is None:
            self.events.add_one(self.time_s, self.step_no, self._code, KIND_CODE[kind], seq,
                                count=count)
        else:
            self.events.add_one(self.time_s, self.step_no, self._code, KIND_CODE[kind], seq,
                                REASON_CODE[adm.reason.value if adm.reason else None],
                                adm.need_tokens, adm.free_tokens, adm.largest_hole_tokens)

    @property
    def last_fail(self) -> tuple[int, str] | None:
        """(request, reason) of the last admit_failed event since the last admission."""
        return self._last_fail

    def _fail(self, rid: int, adm: Admission) -> None:
        key = (rid, adm.reason.value)
        if key != self._last_fail:  # one event per (request, reason) while it stays blocked
            self._last_fail = key
            self.failures[adm.reason.value] += 1
            self._event("admit_failed", rid, adm)

    # ---- one step ---------------------------------------------------------------------------
    def step(self, time_s: float) -> None:
        self.step_no += 1
        self.time_s = time_s
        plan = self.last_plan = self.sched.schedule()
        self.log_schedule(plan)
        if self.kv is not None and plan.ids.size:
            self._execute(plan)
        fin = self.sched.update(plan)
        self.tokens_generated += self.sched.last_sampled
        self.log_finished(fin)
        self.account()

    def log_schedule(self, plan) -> None:
        """The events of what schedule() decided at this step (self.step_no, self.time_s)."""
        code, ev, time_s = self._code, self.events, self.time_s
        if plan.preempted:
            ev.add_many(time_s, self.step_no, code, KIND_CODE["preempted"],
                        np.asarray(plan.preempted, np.int64))
            self.preemptions += len(plan.preempted)
        for rid, adm in plan.rejected:
            self.rejected += 1
            self._event("rejected", rid, adm)
        if plan.admitted:
            self._last_fail = None
            adm = np.asarray(plan.admitted, np.int64)
            ev.add_many(time_s, self.step_no, code, KIND_CODE["admitted"], adm,
                        self.sched.num_tokens[adm], np.asarray(plan.free_after, np.int64))
        if plan.refused is not None:
            self._fail(*plan.refused)
        self._memory_pressure = plan.pressure

    def log_finished(self, fin: np.ndarray) -> None:
        """Requests that finished in this step's update."""
        if fin.size:
            self.events.add_many(self.time_s, self.step_no, self._code, KIND_CODE["finished"],
                                 fin)
            self.done += int(fin.size)

    def _execute(self, plan) -> None:
        """Real mode: prefill chunks write their tokens; decodes write one and attend."""
        decode = plan.counts == 1
        decode &= plan.starts + 1 == self.sched.num_tokens[plan.ids]
        pre = ~decode
        if pre.any():
            self.kv.on_admit(plan.ids[pre].tolist(), plan.counts[pre].tolist(),
                             plan.starts[pre].tolist())
        if decode.any():
            self.kv.on_decode(plan.ids[decode], plan.starts[decode] + 1)

    def log_evictions(self, steps: np.ndarray, counts: np.ndarray) -> None:
        """counts[i] cached blocks were evicted at steps[i] (a quiet span's steps, in order):
        one event each, at the step's clock."""
        self.events.add_many(steps * self.cfg.step_ms / 1000.0, steps, self._code,
                             KIND_CODE["evicted"], np.full(steps.size, -1, np.int64),
                             count=counts)
        self._evictions_seen += int(counts.sum())

    def account(self) -> None:
        u = self.alloc.usage()
        if u.evictions != self._evictions_seen:
            self._event("evicted", -1, count=u.evictions - self._evictions_seen)
            self._evictions_seen = u.evictions
        pressure, self._memory_pressure = self._memory_pressure, False
        if self.alloc.contiguous:
            self.shares.add(pressure, **self._fill(u))
            return
        slack = u.allocated_tokens - u.used_tokens  # _fill's paged case, without the dict
        internal = self._paged_internal()
        self.shares.add_sums(pressure, 1, u.used_tokens, slack - internal, internal,
                             u.free_tokens, slack)  # (efi 0.0: nothing to add)

    def _paged_internal(self) -> int:
        """A paged lane's internal slack: the slots of the running requests' blocks past
        their last slot (ceil(lens / bs) blocks each, shared ones full)."""
        ids = self.run_ids
        if not ids.size:
            return 0
        if ids is not self._final_of[0]:  # the running set changed (a new array)
            self._final_of = (ids, self.kv_final[ids])
        bs = self.alloc.block_size
        held = -(-self.sched.computed[ids] // bs) * bs
        return int(np.maximum(0, held - self._final_of[1]).sum())

    def _fill(self, u: Usage) -> dict:
        """Where the capacity is in this step (Shares.add's fields)."""
        ids = self.run_ids
        a = self.alloc
        slack = u.allocated_tokens - u.used_tokens
        internal = 0
        tail = 0
        if not a.contiguous:  # shared blocks full: the tails are the slack
            internal, tail = self._paged_internal(), slack
        elif ids.size:
            lens = self.sched.computed[ids]
            held = a.seq_allocated_tokens(ids)
            tail = int(((-lens) % a.block_size).sum())
            internal = int(np.maximum(0, held - self.kv_final[ids]).sum())  # lens + rem
        free = u.free_tokens
        efi = 0.0
        if a.contiguous and free > 0:
            efi = 1.0 - a.check(1).largest_hole_tokens / free
        return {"used": u.used_tokens, "reserved": slack - internal, "internal": internal,
                "free": free, "tail": tail, "efi": efi}

    @property
    def idle(self) -> bool:
        """Nothing running and nothing waiting: a step changes only the clock (and shares)."""
        return not self.sched.running and not self.waiting_count

    def skip_idle(self, k: int, last_time_s: float) -> None:
        """The effect of k idle steps (the last at `last_time_s`), as stepping would have it:
        no allocator call, no event; the all-steps shares grow by k equal steps."""
        self.step_no += k
        self.time_s = last_time_s
        self.shares.add(False, times=k, **self._fill(self.alloc.usage()))

    @property
    def prefix_hit_rate(self) -> float:
        """vLLM's prefix-cache hit rate: hit tokens / known tokens over every admission."""
        q = self.sched.query_tokens
        return self.sched.hit_tokens / q if q else 0.0

    # ---- views -------------------------------------------------------------------------------
    def snapshot(self) -> BlockMap:
        ids = self.run_ids
        return replace(self.alloc.snapshot(), final_seq=ids.astype(np.int32),
                       final_len=self.final_len[ids].astype(np.int32),
                       final_held=self.alloc.seq_allocated_tokens(ids).astype(np.int64))

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
