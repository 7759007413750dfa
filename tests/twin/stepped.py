"""The replay's StepRecord read from Python after each stepped step: the specification the
compiled step log (kvviz/engine/rule/steplog.py, kvviz/twin/logged.py) is held equal to."""
from __future__ import annotations

import numpy as np

from kvviz.engine import Simulation
from kvviz.twin.blockids import Tables
from kvviz.twin.selfcheck import LISTS, TABLE_BUDGET, RecordSpec, StepRecord


def step_through(sim: Simulation, rec: Recorder | None = None
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Step `sim` (one lane) to the end from Python: (step, blocks held, steps it stands for)
    after each advance, an idle span as one entry; `rec` sees every step that was stepped."""
    lane = sim.lanes[0]
    bs = lane.alloc.block_size
    steps, blocks, weight = [], [], []
    while not sim.finished:
        idle = sim._idle_steps()  # the jump Simulation.run(advance="step") makes
        if idle > 0:
            sim.skip_idle(idle)
        else:
            sim.step()
            if rec is not None:
                rec.after_step(lane)
        steps.append(sim.step_no)
        blocks.append(lane.alloc.usage().allocated_tokens // bs)
        weight.append(max(idle, 1))
    return (np.asarray(steps, np.int64), np.asarray(blocks, np.int64),
            np.asarray(weight, np.int64))


class Recorder:
    """Collects a StepRecord from a one-lane Simulation, one stepped step at a time."""

    def __init__(self, spec: RecordSpec | None = None) -> None:
        self.spec = spec or RecordSpec()
        self.live: set[int] = set()
        self.steps: list[int] = []
        self.lists: dict[str, list] = {k: [] for k in LISTS[:3]}
        self.sched: list = []
        self.tables: dict[int, Tables] = {}
        self.table_ids = 0

    def after_step(self, lane) -> None:
        plan = lane.last_plan
        admitted = [int(r) for r in plan.admitted]
        preempted = [int(r) for r in plan.preempted]
        during = (self.live - set(preempted)) | set(admitted)
        after = lane.run_ids
        self.live = set(after.tolist())
        if not during and not preempted:
            return
        step = lane.step_no
        name = self._names
        self.steps.append(step)
        self.lists["admitted"].append(name(admitted))
        self.lists["preempted"].append(name(preempted))
        self.lists["finished"].append(name(sorted(during - self.live)))
        if self.spec.scheduled:
            self.sched.append(name(plan.ids.tolist()))
        want = self.spec.table_steps
        if (want is None or step in want) and self.table_ids < TABLE_BUDGET:
            table = lane.alloc.block_table  # kvviz block b is vLLM's b + 1
            t = Tables.of({int(n): table(r) + 1 for r, n in zip(after.tolist(),
                                                                  name(after.tolist()))})
            self.tables[step] = t
            self.table_ids += int(t.blocks.size)

    def _names(self, ids: list[int]) -> list[int]:
        m = self.spec.seq_ids
        return list(ids) if m is None else m[np.asarray(ids, np.int64)].tolist()

    def record(self) -> StepRecord:
        rec = StepRecord.from_steps(self.steps, self.lists["admitted"],
                                    self.lists["preempted"], self.lists["finished"],
                                    self.sched if self.spec.scheduled else None)
        return StepRecord(rec.busy, rec.lists, self.tables)


