"""One lane: an allocator with its own continuous-batching scheduler state.

Each step: decode_step (one token per running sequence; a failed append preempts by
recompute) -> finish -> schedule (admit FCFS) -> prefill. A sequence admitted in a step starts
decoding in the next one. Requests are indices into the Workload.
"""
from __future__ import annotations

from collections import deque
from dataclasses import replace
from itertools import islice
from typing import Protocol

import numpy as np

from kvviz.alloc.base import Admission, Allocator, Reason, Usage
from kvviz.alloc.prefix import PrefixChain
from kvviz.blockmap import BlockMap
from kvviz.config import EngineConfig, LaneSpec
from kvviz.engine.events import KIND_CODE, REASON_CODE, EventLog
from kvviz.engine.preemption import preempt_from_tail
from kvviz.engine.shares import Shares
from kvviz.workload import Workload


class KVExecutor(Protocol):
    """Real mode: writes K/V and runs attention for what the scheduler decided."""

    def on_admit(self, seq_ids: list[int], num_tokens: list[int]) -> None: ...
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
        n = len(workload)
        self.generated = np.zeros(n, np.int64)  # kept for waiting requests (recompute)
        self.final_len = workload.final_len
        if spec.allocator == "contiguous":
            self.reserve = {"max": np.full(n, engine.max_seq_len, np.int64),
                            "pow2": np.minimum(next_pow2(self.final_len), engine.max_seq_len),
                            "exact": self.final_len.copy()}[spec.reserve]
        else:
            self.reserve = None
        self.front: deque[int] = deque()  # preempted requests, readmitted first
        self.next_new = 0  # next arrived request never admitted yet
        self.arrived = 0
        # running sequences, in admission order; run_len / run_rem are aligned with run_ids
        self.run_ids = np.zeros(0, np.int64)
        self.run_len = np.zeros(0, np.int64)  # KV slots written (prompt + generated)
        self.run_rem = np.zeros(0, np.int64)  # tokens still to generate
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
        cap = allocator.usage().capacity_tokens
        self.capacity = cap
        # requests whose whole life cannot fit even in an empty cache are rejected up front
        final = self.final_len if self.reserve is None else np.maximum(self.final_len,
                                                                        self.reserve)
        self.too_big = allocator.footprints(final) > cap
        self._just_preempted: set[int] = set()  # not readmitted in the step that preempted them
        self.shares = Shares(cap)
        self._memory_pressure = False  # this step: head refused for memory, or a preemption
        # prompts as hash chains, for lanes that cache prefixes (others never share)
        caching = getattr(allocator, "prefix_caching", False) and workload.has_chains
        self._chains = workload.chains() if caching else None
        self.prefix_query_tokens = 0  # prompt tokens admitted (vLLM's prefix_cache_queries)

    @property
    def finished(self) -> bool:
        return self.done + self.rejected == len(self.w)

    def _event(self, kind: str, seq: int, adm: Admission | None = None, count: int = 1) -> None:
        if adm is None:
            self.events.add_one(self.time_s, self.step_no, self._code, KIND_CODE[kind], seq,
                                count=count)
        else:
            self.events.add_one(self.time_s, self.step_no, self._code, KIND_CODE[kind], seq,
                                REASON_CODE[adm.reason.value if adm.reason else None],
                                adm.need_tokens, adm.free_tokens, adm.largest_hole_tokens)

    def _fail(self, rid: int, adm: Admission) -> None:
        if adm.reason is not Reason.POLICY:
            self._memory_pressure = True
        key = (rid, adm.reason.value)
        if key != self._last_fail:  # one event per (request, reason) while it stays blocked
            self._last_fail = key
            self.failures[adm.reason.value] += 1
            self._event("admit_failed", rid, adm)

    # ---- phases ------------------------------------------------------------------------------
    @property
    def waiting_count(self) -> int:
        return len(self.front) + self.arrived - self.next_new

    def arrive(self, upto: int) -> None:
        self.arrived = max(self.arrived, upto)

    def _head(self, k: int) -> np.ndarray:
        """The first k waiting request ids: preempted ones first, then new arrivals."""
        nf = min(k, len(self.front))
        head = np.fromiter(islice(self.front, nf), np.int64, nf)
        if k > nf:
            head = np.concatenate([head, np.arange(self.next_new, self.next_new + k - nf)])
        return head

    def _pop(self, k: int) -> None:
        nf = min(k, len(self.front))
        for _ in range(nf):
            self.front.popleft()
        self.next_new += k - nf

    def _refuse_head(self, rid: int, n: int, reserve: int | None, policy: bool) -> Admission:
        adm = self.alloc.check(n, reserve)
        if adm.ok and policy:
            adm = adm._replace(ok=False, reason=Reason.POLICY)
        if not adm.ok:
            self._fail(rid, adm)
        return adm

    def schedule(self) -> tuple[np.ndarray, np.ndarray]:
        """Admit a FCFS prefix of the waiting requests while memory and limits allow."""
        none = np.zeros(0, np.int64)
        waiting = self.waiting_count
        if not waiting:
            return none, none
        running = int(self.run_ids.size)
        slots = self.cfg.max_num_seqs - running
        while waiting:
            rid = self.front[0] if self.front else self.next_new
            if not self.too_big[rid]:
                break
            self._pop(1)
            self._reject(rid)
            waiting -= 1
        if not waiting or rid in self._just_preempted:
            return none, none
        if slots > 0:  # fast refusal: most steps under pressure cannot admit even the head
            m = int(self.w.prompt[rid] + self.generated[rid])
            r = None if self.reserve is None else max(m, int(self.reserve[rid]))
            adm = self.alloc.check(m, r)
            if not adm.ok and (running or adm.reason is Reason.POLICY):
                self._fail(rid, adm)
                return none, none
        cands = self._head(min(waiting, max(slots, 1), 4096))
        stop = self.too_big[cands]
        if self._just_preempted:
            stop |= np.fromiter((c in self._just_preempted for c in cands.tolist()), bool,
                                cands.size)
        if stop.any():  # admit only up to the next request that must wait or be rejected
            cands = cands[: int(np.argmax(stop))]
        n = self.w.prompt[cands] + self.generated[cands]
        reserve = None if self.reserve is None else np.maximum(n, self.reserve[cands])
        if slots <= 0:  # batch full: POLICY if memory would have served the head
            self._refuse_head(int(cands[0]), int(n[0]), None if reserve is None
                              else int(reserve[0]), policy=True)
            return none, none
        kb = max(1, int(np.searchsorted(np.cumsum(n), self.cfg.max_batched_tokens, "right")))
        cands, n = cands[:kb], n[:kb]
        reserve = None if reserve is None else reserve[:kb]
        prefixes = self._prefixes(cands) if self._chains is not None else None
        keep = 0
        if self.cfg.watermark > 0 and self.reserve is None and running:
            keep = int(self.cfg.watermark * self.capacity)  # vLLM-style headroom for growth
        free_after = np.zeros(cands.size, np.int64)
        k = self.alloc.admit_many(cands, n, reserve, prefixes, keep, out_free=free_after)
        admitted, lens = cands[:k], n[:k]
        self.prefix_query_tokens += int(lens.sum())
        self._pop(k)
        if k:
            self._last_fail = None
            self.events.add_many(self.time_s, self.step_no, self._code, KIND_CODE["admitted"],
                                 admitted, lens, free_after[:k])
        if k < cands.size:
            rid, m = int(cands[k]), int(n[k])
            r = None if reserve is None else int(reserve[k])
            adm = self._refuse_head(rid, m, r, policy=True)
            if not adm.ok and adm.reason is not Reason.POLICY and running == 0 and k == 0:
                self._pop(1)  # nothing runs, nothing will free memory: it can never fit
                self._reject(rid, adm)
        elif self.waiting_count and running + k >= self.cfg.max_num_seqs:
            head = self._head(1)
            m = int(self.w.prompt[head[0]] + self.generated[head[0]])
            r = None if self.reserve is None else max(m, int(self.reserve[head[0]]))
            self._refuse_head(int(head[0]), m, r, policy=True)
        return admitted, lens

    def _reject(self, rid: int, adm: Admission | None = None) -> None:
        """`rejected`: the request cannot fit even when nothing else runs. The event carries
        the allocator's answer for what it would have to place: the reservation (contiguous)
        or the final length (paged), rounded to cells / blocks / a power of two. That need
        exceeds the capacity (or, with nothing running, the free total), so the reason is
        CAPACITY."""
        if adm is None:
            whole = int(self.final_len[rid])
            if self.reserve is not None:
                whole = max(whole, int(self.reserve[rid]))
            adm = self.alloc.check(whole)
        self.rejected += 1
        self._event("rejected", rid, adm)

    def _prefixes(self, cands: np.ndarray) -> list[PrefixChain | None]:
        """Each candidate's prompt as a hash chain (None: nothing to share)."""
        ptr, ids, block = self._chains
        lo, hi = ptr[cands].tolist(), ptr[cands + 1].tolist()
        return [PrefixChain(ids[a:b], block, p) if b > a else None
                for a, b, p in zip(lo, hi, self.w.prompt[cands].tolist())]

    def prefill(self, new: np.ndarray, lens: np.ndarray) -> None:
        if new.size:
            self.run_ids = np.concatenate([self.run_ids, new])
            self.run_len = np.concatenate([self.run_len, lens])
            self.run_rem = np.concatenate([self.run_rem, self.w.output[new] - self.generated[new]])
            if self.kv is not None:
                self.kv.on_admit(new.tolist(), lens.tolist())

    def _keep(self, mask: np.ndarray) -> None:
        self.run_ids = self.run_ids[mask]
        self.run_len = self.run_len[mask]
        self.run_rem = self.run_rem[mask]

    def decode_step(self) -> None:
        ids = self.run_ids
        self._just_preempted.clear()  # also when a preemption emptied the batch (else a livelock)
        if not ids.size:
            return
        ok = self.alloc.append_batch(ids)
        if not ok.all():
            keep = preempt_from_tail(self.alloc, ids, ok)
            lost = ids[~keep]
            self.generated[lost] = self.w.output[lost] - self.run_rem[~keep]
            self.events.add_many(self.time_s, self.step_no, self._code,
                                 KIND_CODE["preempted"], lost)
            self.front.extendleft(reversed(lost.tolist()))  # back to the front, in order
            self._just_preempted.update(lost.tolist())
            self.preemptions += int(lost.size)
            self._memory_pressure = True
            self._keep(keep)
            ids = self.run_ids
        self.run_len += 1
        self.run_rem -= 1
        self.tokens_generated += int(ids.size)
        if self.kv is not None and ids.size:
            self.kv.on_decode(ids, self.run_len)

    def finish(self) -> None:
        done = self.run_rem <= 0
        if done.any():
            gone = self.run_ids[done]
            self.alloc.release_many(gone)
            self.generated[gone] = self.w.output[gone]
            self.events.add_many(self.time_s, self.step_no, self._code, KIND_CODE["finished"],
                                 gone)
            self.done += int(gone.size)
            self._keep(~done)

    def account(self) -> None:
        u = self.alloc.usage()
        if u.evictions != self._evictions_seen:
            self._event("evicted", -1, count=u.evictions - self._evictions_seen)
            self._evictions_seen = u.evictions
        pressure, self._memory_pressure = self._memory_pressure, False
        self.shares.add(pressure, **self._fill(u))

    def _fill(self, u: Usage) -> dict:
        """Where the capacity is in this step (Shares.add's fields)."""
        ids = self.run_ids
        internal = 0
        tail = 0
        if ids.size:
            held = self.alloc.seq_allocated_tokens(ids)
            lens = self.run_len
            internal = int(np.maximum(0, held - (lens + self.run_rem)).sum())
            tail = int(((-lens) % self.alloc.block_size).sum())
        slack = u.allocated_tokens - u.used_tokens
        free = u.free_tokens
        efi = 0.0
        if self.alloc.contiguous and free > 0:
            efi = 1.0 - self.alloc.check(1).largest_hole_tokens / free
        return {"used": u.used_tokens, "reserved": slack - internal, "internal": internal,
                "free": free, "tail": tail, "efi": efi}

    @property
    def idle(self) -> bool:
        """Nothing running and nothing waiting: a step changes only the clock (and shares)."""
        return not self.run_ids.size and not self.waiting_count

    def skip_idle(self, k: int, last_time_s: float) -> None:
        """The effect of k idle steps (the last at `last_time_s`), as stepping would have it:
        no allocator call, no event; the all-steps shares grow by k equal steps."""
        self.step_no += k
        self.time_s = last_time_s
        self.shares.add(False, times=k, **self._fill(self.alloc.usage()))

    def step(self, time_s: float) -> None:
        self.step_no += 1
        self.time_s = time_s
        # Running sequences take their next slot before anyone new is admitted (as vLLM's
        # scheduler does): admitting first would hand the growth slots of running sequences to
        # newcomers and preempt them in a loop.
        self.decode_step()
        self.finish()
        self.prefill(*self.schedule())
        self.account()

    @property
    def prefix_hit_rate(self) -> float:
        """Prompt tokens served from the prefix cache / prompt tokens admitted (0.0 without)."""
        hits = getattr(self.alloc, "prefix_hit_tokens", 0)
        return hits / self.prefix_query_tokens if self.prefix_query_tokens else 0.0

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
