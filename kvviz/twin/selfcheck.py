"""The self-check: the replay at the node's own settings against what the node did, per step.

Both sides are a `StepRecord`: per busy engine step (a step that scheduled something; the
node does not step while idle, the simulation's clock does, so busy steps are aligned in
order), the requests scheduled and the requests preempted, and where the node's block maps
were sampled, each running request's block ids (vLLM's numbering: kvviz's block b is vLLM's
b + 1, its block 0 the null block). The verdict names the first busy step where they differ
and in what; it never hides a difference.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class StepRecord:
    """Per busy step k: scheduled ids[sched_ptr[k]:sched_ptr[k+1]], preempted
    ids[pre_ptr[k]:pre_ptr[k+1]], each sorted (sets: a log may not keep vLLM's order)."""

    sched_ptr: np.ndarray  # int64 [steps + 1]
    sched_ids: np.ndarray  # int64
    pre_ptr: np.ndarray  # int64 [steps + 1]
    pre_ids: np.ndarray  # int64
    # per busy step: {request: its block ids, vLLM's numbering} after the step, or None
    # where the map was not sampled; () when no step was
    tables: tuple[dict[int, tuple[int, ...]] | None, ...] = ()

    def table(self, k: int) -> dict[int, tuple[int, ...]] | None:
        return self.tables[k] if k < len(self.tables) else None

    @property
    def steps(self) -> int:
        return int(self.sched_ptr.size - 1)

    @property
    def preemptions(self) -> int:
        return int(self.pre_ids.size)

    def scheduled(self, k: int) -> np.ndarray:
        return self.sched_ids[self.sched_ptr[k]:self.sched_ptr[k + 1]]

    def preempted(self, k: int) -> np.ndarray:
        return self.pre_ids[self.pre_ptr[k]:self.pre_ptr[k + 1]]

    @classmethod
    def from_lists(cls, scheduled: list, preempted: list,
                   tables: list | None = None) -> StepRecord:
        """From one list of ids per step each (and the sampled block tables, None where not
        sampled); steps with neither scheduled nor preempted requests are left out."""
        def csr(parts: list) -> tuple[np.ndarray, np.ndarray]:
            ptr = np.zeros(len(parts) + 1, np.int64)
            ptr[1:] = np.cumsum([len(p) for p in parts])
            flat = [np.sort(np.asarray(p, np.int64)) for p in parts]
            ids = np.concatenate(flat) if flat else np.zeros(0, np.int64)
            return ptr, ids.astype(np.int64)

        if len(scheduled) != len(preempted):
            raise ValueError("step record: one scheduled and one preempted list per step")
        busy = [k for k in range(len(scheduled)) if len(scheduled[k]) or len(preempted[k])]
        sp, si = csr([scheduled[k] for k in busy])
        pp, pi = csr([preempted[k] for k in busy])
        tabs = () if tables is None else tuple(
            None if tables[k] is None else {int(r): tuple(int(b) for b in ids)
                                           for r, ids in tables[k].items()} for k in busy)
        return cls(sp, si, pp, pi, tabs)


class Recorder:
    """Collects a StepRecord from a one-lane Simulation, one busy step at a time."""

    def __init__(self, tables: bool = True) -> None:
        self.scheduled: list[np.ndarray] = []
        self.preempted: list[list[int]] = []
        self.tables: list[dict] | None = [] if tables else None

    def after_step(self, lane) -> None:
        plan = lane.last_plan
        if plan is not None and (plan.ids.size or plan.preempted):
            self.scheduled.append(np.asarray(plan.ids, np.int64).copy())
            self.preempted.append(list(plan.preempted))
            if self.tables is not None:  # kvviz block b is vLLM's b + 1
                table = lane.alloc.block_table
                self.tables.append({int(r): tuple((table(r) + 1).tolist())
                                    for r in lane.run_ids.tolist()})

    def record(self) -> StepRecord:
        return StepRecord.from_lists(self.scheduled, self.preempted, self.tables)


def _ids(a: np.ndarray, limit: int = 8) -> str:
    s = ", ".join(str(int(x)) for x in a[:limit])
    return s + (f", ... ({a.size} in all)" if a.size > limit else "")


def compare(node: StepRecord, twin: StepRecord) -> dict:
    """`self_check`: equal, steps_compared, first_difference (None when equal), verdict."""
    n = min(node.steps, twin.steps)
    first = None
    for k in range(n):
        a, b = node.scheduled(k), twin.scheduled(k)
        if a.size != b.size or not np.array_equal(a, b):
            first = {"step": k + 1, "what": "scheduled requests",
                     "node": _ids(a), "replay": _ids(b)}
            break
        a, b = node.preempted(k), twin.preempted(k)
        if a.size != b.size or not np.array_equal(a, b):
            first = {"step": k + 1, "what": "preempted requests",
                     "node": _ids(a), "replay": _ids(b)}
            break
        first = _tables_differ(k, node.table(k), twin.table(k))
        if first is not None:
            break
    if first is None and node.steps != twin.steps:
        first = {"step": n + 1, "what": "step count", "node": str(node.steps),
                 "replay": str(twin.steps)}
    equal = first is None
    sampled = sum(node.table(k) is not None and twin.table(k) is not None for k in range(n))
    if equal:
        verdict = (f"replay equals the node: {n} busy steps, {node.preemptions} preemptions, "
                   "the same requests scheduled and preempted at every step"
                   + (f", every block id at the {sampled} steps whose maps were sampled"
                      if sampled else "; no block map sampled to compare block ids"))
    else:
        verdict = (f"replay differs from the node at busy step {first['step']} "
                   f"({first['what']}: node {first['node']}; replay {first['replay']}); "
                   f"the {first['step'] - 1} steps before it are equal")
    return {"equal": equal, "steps_compared": n if equal else first["step"],
            "block_steps_compared": sampled, "first_difference": first, "verdict": verdict}


def _tables_differ(k: int, node: dict | None, twin: dict | None) -> dict | None:
    """The first request whose block ids differ at busy step k (both sampled), else None."""
    if node is None or twin is None or node == twin:
        return None
    for r in sorted(set(node) | set(twin)):
        if node.get(r) != twin.get(r):
            def show(ids: tuple | None) -> str:
                return "not running" if ids is None else _ids(np.asarray(ids, np.int64))
            return {"step": k + 1, "what": f"block ids of request {r}",
                    "node": show(node.get(r)), "replay": show(twin.get(r))}
    return None


def no_node_run(what: str) -> dict:
    """`self_check` for an input without a node run (a trace): nothing to compare."""
    return {"equal": None, "steps_compared": 0, "block_steps_compared": 0,
            "first_difference": None,
            "verdict": f"{what} is a request stream, not a node's run: there is no node run to "
                       "compare the replay with; the baseline is the rule at the settings "
                       "given (--node-* flags, vLLM's defaults)"}
