"""One what-if configuration's run written as a recording, so Replay can show its block maps.

The run is the same as the table's (one paged lane at the configuration's settings, the same
stream and clock); up to `max_samples` samples (a block map with its block tables, the map's
metrics and the lane's counters) are spread over its busy steps, and every engine event is
written. A new file only: nothing is replaced.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from kvviz.core.metrics import compute
from kvviz.engine import Simulation
from kvviz.store.writer import RunWriter
from kvviz.twin.runner import Stream
from kvviz.twin.settings import NodeSettings


def _counters(lane) -> dict:
    f = lane.failures
    return {"preemptions": lane.preemptions, "admit_failures_capacity": f["CAPACITY"],
            "admit_failures_fragmentation": f["FRAGMENTATION"],
            "admit_failures_policy": f["POLICY"], "tokens_generated": lane.tokens_generated,
            "prefix_query_tokens": lane.prefix_query_tokens,
            "prefix_hit_tokens": lane.prefix_hit_tokens,
            "running": int(lane.run_ids.size), "waiting": int(lane.waiting_count)}


def _with_tables(lane, bm):
    """The map with its live sequences' block tables (docs/FORMAT.md)."""
    tables = getattr(lane.alloc, "block_tables", None)
    if tables is None or bm.final_seq is None:
        return bm
    ids = lane.run_ids
    nb = (lane.alloc.seq_allocated_tokens(ids) // bm.block_size).astype(np.int32)
    tab = tables(ids)
    blocks = tab[np.arange(tab.shape[1])[None, :] < nb[:, None]].astype(np.int32)
    return dataclasses.replace(bm, table_len=nb, table_blocks=blocks)


def record_config(stream: Stream, settings: NodeSettings, path: str | Path, *,
                  source: str = "", busy_steps: int | None = None,
                  max_samples: int = 300) -> Path:
    """Run `settings` on `stream` and write it to the new file `path`; `busy_steps` (the
    table's step count, when known) spaces the samples evenly."""
    sim = Simulation(stream.workload, [settings.lane()], settings.cache(stream.model),
                     settings.engine(stream.step_ms, stream.max_seq_len), advance="step")
    lane = sim.lanes[0]
    meta = {"mode": "sim", "device": "cpu", "source": "kvviz whatif",
            "whatif": {"input": source, "settings": settings.as_dict()},
            "model": {**dataclasses.asdict(stream.model),
                      "kv_bytes_per_token": stream.model.kv_bytes_per_token},
            "cache": {"capacity_tokens": settings.capacity_tokens},
            "engine": dataclasses.asdict(sim.engine),
            "workload": {"trace": source, "num_requests": len(stream.workload)},
            "lanes": [{"name": lane.name, "label": lane.spec.label, "allocator": "paged",
                       "block_size": settings.block_size,
                       "capacity_tokens": settings.capacity_tokens,
                       "num_blocks": settings.usable_blocks,
                       "bytes_per_token": stream.model.kv_bytes_per_token}]}
    every = max(1, (busy_steps or 1) // max_samples)
    writer = RunWriter(path, meta)
    cursor = 0
    try:
        n = 0
        while not sim.finished:
            idle = sim._idle_steps()
            if idle > 0:
                sim.skip_idle(idle)
                continue
            sim.step()
            n += 1
            if n % every and not sim.finished:
                continue
            bm = _with_tables(lane, lane.snapshot())
            writer.add_sample(sim.time_s, sim.step_no, lane.name,
                              {**compute(bm).as_dict(), **_counters(lane)}, bm)
            events, cursor = sim.events.since(cursor)
            writer.add_events(events)
            writer.commit()
    except BaseException:
        writer.close("failed", "the what-if run stopped")
        raise
    writer.close("finished")
    return Path(path)
