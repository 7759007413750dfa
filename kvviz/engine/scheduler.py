"""The scheduling rule: admission, token budget, preemption and finish, in one place.

vLLM 0.32's v1 Scheduler (vllm/v1/core/sched/scheduler.py), FCFS with recompute preemption,
synchronous scheduling, no speculative decoding. Each request has num_tokens (prompt + tokens
sampled so far) and computed (tokens whose KV is written). One engine step is

  schedule()  the token budget (max_num_batched_tokens) pays the running requests first, in
              order: each computes num_tokens - computed tokens (one for a decode, a chunk of
              its prompt while prefilling). A request whose slots cannot be allocated
              preempts the last running request (its blocks freed, computed reset to 0, back
              to the front of the waiting queue) until it fits or preempts itself. Then, if
              nobody was preempted, waiting requests are admitted in order while budget,
              max_num_seqs and memory allow: a hit of cached blocks counts as computed, the
              rest is prefilled (a chunk of it when the budget is short; with chunked prefill
              off, a prompt that does not fit the budget waits). Admission needs the free
              blocks for all num_tokens (vLLM's scheduler_reserve_full_isl) plus the
              watermark, waived while nothing runs.
  update()    every request whose KV caught up with num_tokens samples one token (so the step
              that completes a prefill samples the first); one that reached its output length
              finishes and frees its blocks there: its last token never gets a KV slot.

A resumed request recomputes prompt + all generated tokens (its own cached blocks may serve).
kvviz's own additions: a request whose whole life cannot fit the empty cache is rejected at
the head of the queue (vLLM would wait for it forever); workloads are cut to max_seq_len
beforehand, so vLLM's max_model_len never binds here.

The fast paths (span.py, window.py, queue.py, walk.py) never re-decide: they ask the pieces
schedule() itself is made of, `make_room` (who is preempted for a request short of memory)
and `verdict` (a waiting request's answer), or the limits in closed form below. _admit
itself asks a long wave of heads as runs (`admit_run`, verdict in closed form; admitrun.py).
"""
from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from kvviz.alloc.base import Admission, Reason
from kvviz.core.config import EngineConfig
from kvviz.core.workload import Workload
from kvviz.engine.admitrun import AdmitRuns
from kvviz.engine.prefixhead import head_hold

EMPTY = np.zeros(0, np.int64)
RUN_AFTER = 8  # _admit: heads admitted one by one before the next ones are asked as a run


class Plan(NamedTuple):
    """What one schedule() decided, in vLLM's order: running requests, then admissions."""

    ids: np.ndarray  # requests that compute this step
    starts: np.ndarray  # tokens each had computed before the step
    counts: np.ndarray  # tokens each computes now
    admitted: list[int]  # among ids, newly running (new or resumed)
    hit_tokens: list[int]  # per admitted request: tokens served by cached blocks
    free_after: list[int]  # per admitted request: free slots right after its admission
    preempted: list[int]
    rejected: list[tuple[int, Admission]]
    refused: tuple[int, Admission] | None  # the head that had to wait, and why
    pressure: bool  # a preemption, or the head refused for memory
    caught_up: bool = False  # every one of ids computes all its known tokens (and samples)


def make_room(run: list[int], r: int, fits: Callable[[], bool],
              preempt: Callable[[int], None]) -> bool:
    """The rule's preemption, for running request r that needs memory: while it does not
    fit, the last running request leaves `run` and is preempted, until r fits (True) or
    r itself was the one preempted (False)."""
    while not fits():
        victim = run.pop()
        preempt(victim)
        if victim == r:
            return False
    return True


def _part(ids: list[int], starts: list[int], counts: list[int]):
    return (np.asarray(ids, np.int64), np.asarray(starts, np.int64),
            np.asarray(counts, np.int64))


class Scheduler(AdmitRuns):
    def __init__(self, w: Workload, engine: EngineConfig, space, too_big: np.ndarray) -> None:
        self.w, self.cfg, self.space, self.too_big = w, engine, space, too_big
        n = len(w)
        self.num_tokens = w.prompt.astype(np.int64).copy()
        self.computed = np.zeros(n, np.int64)
        self.generated = np.zeros(n, np.int64)
        self.running: list[int] = []
        self._ids: np.ndarray | None = EMPTY  # `running` as an array (None: rebuild)
        self.front: deque[int] = deque()  # preempted requests, ahead of new arrivals
        self.next_new = 0
        self.arrived = 0
        self.caching = getattr(space, "keys", None) is not None  # a prefix-caching lane
        self.query_tokens = 0  # vLLM's prefix-cache queries: num_tokens at every admission
        self.hit_tokens = 0
        self.last_sampled = 0  # tokens the last update sampled
        self._output = w.output  # (an attribute read per step)
        self._flag = np.zeros(n, np.bool_)  # scratch: update's finished requests
        self._asked: tuple[int, Admission] | None = None  # schedule()'s refusal: head_refusal

    def running_ids(self) -> np.ndarray:
        """The running requests as an int64 array (cached until the list changes)."""
        if self._ids is None:
            self._ids = np.asarray(self.running, np.int64)
        return self._ids

    # ---- the waiting queue ----------------------------------------------------------------
    @property
    def waiting_count(self) -> int:
        return len(self.front) + self.arrived - self.next_new

    def head(self) -> int:
        return self.front[0] if self.front else self.next_new

    def pop_head(self) -> None:
        if self.front:
            self.front.popleft()
        else:
            self.next_new += 1

    # ---- one step -------------------------------------------------------------------------
    def schedule(self) -> Plan:
        budget = self.cfg.max_batched_tokens
        self._asked = None
        parts: list[tuple[np.ndarray, np.ndarray, np.ndarray | None]] = []  # decode runs
        ids: list[int] = []  # requests scheduled one by one, since the last decode run
        starts: list[int] = []
        counts: list[int] = []
        preempted: list[int] = []
        run, comp, known, space = self.running, self.computed, self.num_tokens, self.space
        caught_up = True  # every scheduled request computes all its known tokens
        short = False  # the last decode run stopped for memory: run[i] needs a block

        def drop(victim: int) -> None:
            if self._ids is not None:  # the tail leaves: the array's prefix stays
                self._ids = self._ids[:len(run)]
            self._preempt(victim)
            preempted.append(victim)

        i = 0
        while i < len(run) and budget > 0:
            r = run[i]
            if not short and known[r] - comp[r] == 1:  # decodes in a row: grow those that fit
                seg = self.running_ids()[i:i + budget]
                lens = comp[seg]
                dec = known[seg] - lens == 1
                if not dec.all():
                    m = int(np.argmin(dec))
                    seg, lens = seg[:m], lens[:m]
                k = space.decode_many(seg, lens)
                if k:
                    if ids:
                        parts.append(_part(ids, starts, counts))
                        ids, starts, counts = [], [], []
                    if k < seg.size:
                        seg, lens, short = seg[:k], lens[:k], True
                    parts.append((seg, lens, None))
                    comp[seg] = lens + 1
                    budget -= k
                    i += k
                    continue
            short = False
            n = min(int(known[r] - comp[r]), budget)
            start = int(comp[r])
            if not make_room(run, r, lambda r=r, end=start + n: space.grow(r, end), drop):
                break
            ids.append(r)
            starts.append(start)
            counts.append(n)
            comp[r] = start + n
            caught_up = caught_up and start + n == known[r]
            budget -= n
            i += 1
        admitted, hits, free, rejected, refused = [], [], [], [], None
        if not preempted:
            refused = self._asked = self._admit(budget, ids, counts, admitted, hits, free,
                                                rejected)
            starts.extend(hits)
        pressure = bool(preempted) or (refused is not None
                                       and refused[1].reason is not Reason.POLICY)
        if ids or not parts:
            parts.append(_part(ids, starts, counts))
        if len(parts) == 1:
            a_ids, a_starts, a_counts = parts[0]
            if a_counts is None:
                a_counts = np.ones(a_ids.size, np.int64)
        else:
            a_ids, a_starts, a_counts = (np.concatenate(x) for x in zip(*(
                (p[0], p[1], np.ones(p[0].size, np.int64) if p[2] is None else p[2])
                for p in parts)))
        return Plan(a_ids, a_starts, a_counts, admitted, hits, free, preempted, rejected,
                    refused, pressure, caught_up and not admitted)

    def admissions(self, budget: int) -> Plan:
        """schedule()'s admissions alone, for a step whose running requests all decode within
        the budget (`budget`: what they leave) and preempt nobody: kvviz/engine/queue.py
        calls it only at the steps where the answer may change."""
        ids: list[int] = []
        counts: list[int] = []
        admitted, hits, free, rejected = [], [], [], []
        refused = self._admit(budget, ids, counts, admitted, hits, free, rejected)
        pressure = refused is not None and refused[1].reason is not Reason.POLICY
        return Plan(np.asarray(ids, np.int64), np.asarray(hits, np.int64),
                    np.asarray(counts, np.int64), admitted, hits, free, [], rejected, refused,
                    pressure)

    def _preempt(self, r: int) -> None:
        self._asked = None
        self.space.free(r)
        self.computed[r] = 0
        self.front.appendleft(r)

    def _admit(self, budget: int, ids: list[int], counts: list[int], admitted: list[int],
               hits_out: list[int], free_out: list[int],
               rejected: list) -> tuple[int, Admission] | None:
        """Admit waiting requests in order; returns the head left waiting and why (None when
        the queue emptied or the budget ran out)."""
        space = self.space
        streak = 0  # admitted one by one since the last run
        while budget > 0 and self.waiting_count:
            if streak >= RUN_AFTER:  # a long wave: the next heads as runs (`admit_run`)
                streak = 0
                taken = self._admit_run(budget, ids, counts, admitted, hits_out, free_out)
                if taken:
                    budget -= taken
                    continue
            streak += 1
            r = self.head()
            if self.too_big[r]:
                self.pop_head()
                rejected.append((r, self._whole(r)))
                continue
            adm, total, hits, hit, n = self._answer(r, budget)
            if adm is not None:
                return r, adm
            space.admit(r, hit + n, hits, total)
            self.pop_head()
            self.running.append(r)
            self._ids = None
            self.computed[r] = hit + n
            if self.caching:  # vLLM counts queries only where it looks the cache up
                self.query_tokens += total
                self.hit_tokens += hit
            ids.append(r)
            counts.append(n)
            admitted.append(r)
            hits_out.append(hit)
            free_out.append(space.alloc.usage().free_tokens)
            budget -= n
        return None

    def admit_run(self, totals: np.ndarray, running: int, budget: int, free: int) -> int:
        """`verdict`'s answers in closed form for waiting requests asked in a row, none too
        big, none with hits or live (a paged lane without prefix caching): `totals` their
        known tokens, with `running` requests running, `budget` tokens and `free` blocks
        left before the first. Returns how many leading ones are admitted, each computing
        its whole total (the next one gets a chunk, waits or is refused: ask `verdict`).
        Request i is asked with running + i running, the budget and blocks less those of
        the i before it; the watermark waived while nothing runs (`PagedSpace.fits`)."""
        ahead = np.cumsum(totals) - totals
        nrun = running + np.arange(totals.size)
        need = self.space.blocks_for(totals)
        left = free - (np.cumsum(need) - need)
        ok = (totals <= budget - ahead) & (nrun < self.cfg.max_num_seqs)
        ok &= self.space.fits(need, left, nrun == 0)
        return int(totals.size) if ok.all() else int(np.argmin(ok))

    def admits_whole(self, total: int, running: int, budget: int, need: int,
                     free: int) -> bool:
        """`admit_run`'s test for one head (kvviz/engine/walk.py): a waiting request with
        `total` known tokens, no hits, not live, asking `need` blocks, is admitted computing
        them all (True) with `running` requests running, `budget` tokens and `free` blocks
        left; False: it gets a chunk, waits or is refused (ask `verdict`)."""
        return (total <= budget and running < self.cfg.max_num_seqs
                and self.space.fits(need, free, running == 0))

    def _answer(self, r: int, budget: int) -> tuple[Admission | None, int, list[int], int, int]:
        """Waiting request r's answer with `budget` tokens left: (the refusal, None when it
        is admitted; its known tokens; its hit blocks; their tokens; the tokens it computes)."""
        total = int(self.num_tokens[r])
        hits, hit = self.space.hits(r, total)
        adm, n = self.verdict(total, hit, len(self.running), budget,
                              lambda empty: self.space.check(r, total, hits, empty))
        return adm, total, hits, hit, n

    def verdict(self, total: int, hit: int, running: int, budget: int,
                memory: Callable[[bool], Admission]) -> tuple[Admission | None, int]:
        """The rule's answer to a waiting request with `total` known tokens, `hit` of them
        served by cached blocks, while `running` requests run and `budget` tokens are left:
        (its refusal, None when it is admitted; the tokens it computes). memory(empty): the
        space's answer for it (empty: nothing runs, vLLM waives the watermark). A limit
        that binds while memory would serve makes the refusal POLICY."""
        cfg = self.cfg
        n = total - hit
        if running >= cfg.max_num_seqs or (not cfg.enable_chunked_prefill and n > budget):
            adm = memory(running == 0)
            return (adm if not adm.ok else adm._replace(ok=False, reason=Reason.POLICY)), 0
        adm = memory(running == 0)
        return (None if adm.ok else adm), min(n, budget)

    def head_refusal(self) -> tuple[int, Admission | None] | None:
        """For a span after a step that logged events (every running request decoding):
        how the next step answers the head of the queue, by the state alone. (head, its
        refusal), (head, None) when it would be admitted, or None when the next step does
        not ask (nobody waits, or the decodes use the budget). If this step's schedule()
        refused this head and nothing was freed since, that refusal: memory and the running
        count are as they were, and with chunked prefill the budget only gates the ask."""
        budget = self.budget_after_decodes(len(self.running))
        if not self.waiting_count or budget <= 0:
            return None
        r = self.head()
        if self.too_big[r]:
            return r, None  # rejected next step: an event
        asked = self._asked
        if asked is not None and asked[0] == r and self.cfg.enable_chunked_prefill:
            return asked
        return r, self._answer(r, budget)[0]

    def decodes_fit(self, running: np.ndarray) -> np.ndarray:
        """Whether schedule() gives every one of `running` decoding requests its token
        (the budget pays running requests first, in order)."""
        return running <= self.cfg.max_batched_tokens

    def budget_after_decodes(self, running: int) -> int:
        """What schedule() leaves for admissions after `running` decodes (<= 0: none)."""
        return self.cfg.max_batched_tokens - running

    def finish_steps(self, at, requests: np.ndarray, decoding: bool) -> np.ndarray:
        """update()'s finishes in closed form, for kvviz/engine/window.py and queue.py: the
        step at which each of `requests` samples its last token if it computes at every step
        after step `at` (an array or a step), one token each. decoding: they decode from
        step at + 1 with `generated` tokens sampled so far; else their prefill completes at
        step `at` (that step samples their first token)."""
        out = self._output[requests]
        if decoding:
            return at + out - self.generated[requests]
        return at + out - 1

    def admitted_whole(self, running: np.ndarray, slot: np.ndarray, ahead: np.ndarray,
                       prompt: np.ndarray) -> np.ndarray:
        """`_answer`'s limits in closed form, for kvviz/engine/window.py: with `running`
        decoding requests, `slot` requests admitted before it in the step and `ahead` prompt
        tokens taken by them, a new request (never too big, no prefix hits) is admitted with
        its whole prompt (True), or it gets a chunk or waits (False: a limit binds). Memory
        is the space's half (`PagedSpace.fits`, or its own check for a contiguous lane)."""
        left = self.cfg.max_batched_tokens - running - ahead
        return (prompt <= left) & (running + slot < self.cfg.max_num_seqs)

    def _whole(self, r: int) -> Admission:
        """Why r can never run: its whole life (prompt + output - 1 slots, or its
        reservation) exceeds the capacity."""
        space = self.space
        whole = int(self.w.prompt[r] + self.w.output[r] - 1)
        reserve = getattr(space, "reserve", None)
        if reserve is not None:
            whole = max(whole, int(reserve[r]))
        return space.alloc.check(whole)

    def quiet_steps(self, limit: int) -> int:
        """How many next steps (<= limit) decide exactly the same, writing one token per
        running request and nothing else (0: unknown or none), given that the next one is
        quiet (the caller checked: nothing preempted, and the head of the queue, if asked,
        is refused as it was last; kvviz/engine/span.py). They do while every running
        request decodes within the budget, none finishes, the free blocks cover the span's
        new blocks, and the free blocks stay on the same side of the head's need.
        Arrivals are the caller's bound (they matter only while nobody waits)."""
        run, space = self.running, self.space
        if not run or len(run) > self.cfg.max_batched_tokens:
            return 0
        ids = self.running_ids()
        lens = self.computed[ids]
        if (self.num_tokens[ids] - lens != 1).any():
            return 0
        m = min(limit, int((self.w.output[ids] - self.generated[ids]).min()) - 1)
        if m <= 0:
            return 0
        floor = 0
        if self.waiting_count and len(run) < self.cfg.max_batched_tokens:  # a refused head
            r = self.head()
            if self.too_big[r]:
                return 0
            t = int(self.num_tokens[r])  # with prefix caching its hits must stay too
            floor, m = head_hold(space, r, t, lens, m) if self.caching else (
                space.answer_floor(r, t), m)
        return space.span(ids, lens, m, floor)

    def update(self, plan: Plan) -> np.ndarray:
        """Sample one token for every request whose KV caught up; finish (and free) those
        that reached their output length. Returns the finished requests, in step order."""
        ids = plan.ids
        self.last_sampled = 0
        if not ids.size:
            return EMPTY
        if plan.caught_up:
            sampled = ids
        else:
            done = self.computed[ids] == self.num_tokens[ids]
            sampled = ids if done.all() else ids[done]
        self.last_sampled = int(sampled.size)
        self.num_tokens[sampled] += 1
        gen = self.generated[sampled] + 1
        self.generated[sampled] = gen
        fin = sampled[gen >= self._output[sampled]]
        if fin.size:
            self._asked = None  # memory and the running count changed
            for r in fin.tolist():
                self.space.free(r)
                self.space.done(r)
            arr, flag = self.running_ids(), self._flag
            flag[fin] = True
            self._ids = arr[~flag[arr]]
            flag[fin] = False
            self.running = self._ids.tolist()
        return fin
