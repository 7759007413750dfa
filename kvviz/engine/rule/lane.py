"""One lane over the compiled rule: Python builds the state once, then asks the rule to
advance (a whole run, or one step at a time for a live collector) and reads the arrays.
"""
from __future__ import annotations

import numpy as np

from kvviz.core.blockmap import FREE, BlockMap
from kvviz.core.config import EngineConfig, LaneSpec
from kvviz.core.workload import Workload
from kvviz.engine.eventlog import DTYPES, EventColumns
from kvviz.engine.rule import build, state as S
from kvviz.engine.rule.advance import FULL, advance, step_at
from kvviz.engine.shares import Shares

NO_LIMIT = 2**63 - 1
REASONS = ("CAPACITY", "FRAGMENTATION", "POLICY")


class RuleLane:
    def __init__(self, name: str, spec: LaneSpec, workload: Workload, engine: EngineConfig,
                 capacity_tokens: int, bytes_per_token: int = 0,
                 steps: np.ndarray | None = None) -> None:
        self.name, self.spec, self.w, self.engine = name, spec, workload, engine
        self.bytes_per_token = bytes_per_token
        self.cfg, self.req, self.pool = build.build(spec, workload, engine, capacity_tokens,
                                                    steps)
        self.capacity = self.cfg.capacity
        self.final_len = workload.final_len
        self.wall_seconds = 0.0
        self._n = len(workload)

    # ---- driving --------------------------------------------------------------------------
    def run(self, until_step: int | None = None) -> None:
        """Step on the lane's own clock until it finishes (or reaches `until_step`)."""
        until = NO_LIMIT if until_step is None else until_step
        while advance(self.pool, self.cfg, self.req, until) == FULL:
            self._grow_events()

    def step_at(self, arrived: int, time_s: float) -> None:
        """One step at the caller's clock with `arrived` requests arrived."""
        while step_at(self.pool, self.cfg, self.req, arrived, float(time_s)) == FULL:
            self._grow_events()

    def _grow_events(self) -> None:
        p, n = self.pool, int(self.pool.c[S.NUM_EVENTS])
        bound = 2 * int(p.c[S.NUM_RUNNING]) + self.cfg.max_num_seqs + int(
            p.c[S.TOO_BIG_LEFT]) + 2
        size = max(2 * p.ev_step.size, n + bound)
        fresh = build.events(size)
        for f, a in fresh.items():
            a[:n] = getattr(p, f)[:n]
        self.pool = p._replace(**fresh)

    def drain(self, lane_code: int, lanes: tuple[str, ...] = ()) -> EventColumns:
        """The events logged since the last drain, as this lane's columns (lane_code in a
        log whose lanes are `lanes`)."""
        p, n = self.pool, int(self.pool.c[S.NUM_EVENTS])
        cols = {"time_s": p.ev_time[:n].copy(), "step": p.ev_step[:n].copy(),
                "lane": np.full(n, lane_code, DTYPES["lane"]), "kind": p.ev_kind[:n].copy(),
                "seq_id": p.ev_seq[:n].copy(), "reason": p.ev_reason[:n].copy(),
                "need_tokens": p.ev_need[:n].copy(), "free_tokens": p.ev_free[:n].copy(),
                "largest_hole_tokens": p.ev_largest[:n].copy(),
                "count": p.ev_count[:n].copy()}
        p.c[S.NUM_EVENTS] = 0
        return EventColumns(cols, lanes)

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
        return self._c(S.ARRIVED)

    @property
    def finished(self) -> bool:
        return self.done + self.rejected == self._n

    @property
    def waiting_count(self) -> int:
        c = self.pool.c
        return int(c[S.NUM_FRONT] + c[S.ARRIVED] - c[S.NEXT_NEW])

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
        return self.req.num_output_tokens

    def scheduled(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The last step's plan: (requests, tokens computed before, tokens computed now), in
        vLLM's order (running requests, then admissions)."""
        p, k = self.pool, self._c(S.NUM_SCHED)
        return p.sched_ids[:k].copy(), p.sched_starts[:k].copy(), p.sched_counts[:k].copy()

    def block_table(self, r: int) -> np.ndarray:
        """Running request r's blocks in logical order (paged lanes)."""
        row = int(self.req.row[r])
        if row < 0:
            raise KeyError(f"request {r} is not running")
        return self.pool.block_table[row, :self.pool.row_num_blocks[row]].copy()

    def snapshot(self) -> BlockMap:
        ids = self.run_ids
        p, cfg, bs = self.pool, self.cfg, self.cfg.block_size
        rows = self.req.row[ids]
        if cfg.paged:
            owned = p.block_owner >= 0
            filled = np.where(owned, bs, p.content).astype(np.int32)
            for row in rows.tolist():
                nb, length = int(p.row_num_blocks[row]), int(p.row_len[row])
                tbl = p.block_table[row, :nb]
                fill = np.clip(length - np.arange(nb) * bs, 0, bs)
                part = fill < bs
                filled[tbl[part]] = fill[part]
            bm = BlockMap(owner=np.where(owned, p.block_owner, FREE).astype(np.int32),
                          filled=filled, allocated=np.where(owned, bs, 0).astype(np.int32),
                          refcount=p.ref_cnt.astype(np.int16), cached=p.in_lru.copy(),
                          block_size=bs, bytes_per_token=self.bytes_per_token,
                          label=self.spec.label, contiguous=False)
            held = p.row_num_blocks[rows] * bs
        else:
            size = p.row_num_blocks[rows]
            owner = np.full(cfg.num_blocks, FREE, np.int32)
            filled = np.zeros(cfg.num_blocks, np.int32)
            allocated = np.zeros(cfg.num_blocks, np.int32)
            for r, row, k in zip(ids.tolist(), rows.tolist(), size.tolist()):
                s = int(p.row_start[row])
                owner[s:s + k] = r
                filled[s:s + k] = np.clip(p.row_len[row] - np.arange(k) * bs, 0, bs)
                allocated[s:s + k] = bs
            bm = BlockMap(owner=owner, filled=filled, allocated=allocated,
                          refcount=(owner != FREE).astype(np.int16),
                          cached=np.zeros(cfg.num_blocks, np.bool_), block_size=bs,
                          bytes_per_token=self.bytes_per_token, label=self.spec.label,
                          contiguous=True, buddy=self.spec.placement == "buddy")
            held = size * bs
        from dataclasses import replace
        return replace(bm, final_seq=ids.astype(np.int32),
                       final_len=self.final_len[ids].astype(np.int32),
                       final_held=held.astype(np.int64))

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
