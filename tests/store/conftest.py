"""A small recording made in-process: sim mode, both default lanes, a few hundred steps."""
from __future__ import annotations

from pathlib import Path

import pytest

from kvviz.core.config import CacheConfig, LaneSpec, WorkloadConfig
from kvviz.core.metrics import compute
from kvviz.core.workload import generate
from kvviz.engine import Simulation
from kvviz.store.writer import RunWriter

LANES = ("contiguous:first-fit:max", "paged:16")


def record(path: Path, steps: int = 400, every: int = 10, budget: int = 200 * 2**20,
           requests: int = 300) -> Simulation:
    sim = Simulation(generate(WorkloadConfig(num_requests=requests, rate=50.0, seed=3)),
                     [LaneSpec.parse(s) for s in LANES], CacheConfig(capacity_tokens=16384))
    w = RunWriter(path, {"mode": "sim", "lanes": [{"name": ln.name} for ln in sim.lanes]},
                  blockmap_budget_bytes=budget)
    cursor = 0
    for i in range(1, steps + 1):
        sim.step()
        if i % every == 0:
            for ln in sim.lanes:
                bm = ln.snapshot()
                w.add_sample(sim.time_s, sim.step_no, ln.name,
                             {**compute(bm).as_dict(), "running": int(ln.run_ids.size)}, bm)
            evs, cursor = sim.events.since(cursor)
            w.add_events(evs)
            w.add_device_memory(sim.time_s, {"nvml_status": "unavailable", "rss": 1})
            w.commit()
    w.close("finished")
    return sim


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Simulation]:
    path = tmp_path_factory.mktemp("rec") / "run.db"
    return path, record(path)
