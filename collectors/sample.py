"""What one sample holds: a Batch of every lane's LaneSample, the new events, device memory.

collectors/engine_collector.py builds one Batch every 1/hz seconds and hands it to the store
writer (collectors/writer_client.py). A lane's counters (COUNTER_KEYS, cumulative over a
--loop run) and its block map (with each live sequence's block table, for paged lanes) go to
the store as docs/FORMAT.md describes.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from kvviz.core.blockmap import BlockMap
from kvviz.engine.eventlog import EventColumns
from kvviz.engine.lane import Lane
from kvviz.engine.shares import Shares


class LaneSample(NamedTuple):
    lane: str
    step: int
    counters: dict
    blockmap: BlockMap


class Batch(NamedTuple):
    t: float
    lanes: list[LaneSample]
    events: EventColumns  # already in run time and run-wide sequence ids
    device: Callable[[], list[dict]] | None  # called in put() (cheap: RSS, NVML, torch)
    kv: list | tuple = ()  # the collector's own published KV-event batches (engine_source rows)


COUNTER_KEYS = ("preemptions", "admit_failures_capacity", "admit_failures_fragmentation",
                "admit_failures_policy", "tokens_generated", "prefix_query_tokens",
                "prefix_hit_tokens",
                *Shares(1).counters())  # memory-pressure steps and share sums (Live)


def lane_counters(lane: Lane) -> dict:
    f = lane.failures
    return {"preemptions": lane.preemptions, "admit_failures_capacity": f["CAPACITY"],
            "admit_failures_fragmentation": f["FRAGMENTATION"],
            "admit_failures_policy": f["POLICY"], "tokens_generated": lane.tokens_generated,
            "prefix_query_tokens": lane.prefix_query_tokens,
            "prefix_hit_tokens": int(getattr(lane.alloc, "prefix_hit_tokens", 0)),
            **lane.shares.counters()}


def with_tables(lane: Lane, bm: BlockMap) -> BlockMap:
    """A paged lane's map with its live sequences' block tables (final_seq order), so a
    reader can tie each block to its holder's logical block index (docs/FORMAT.md)."""
    tables = getattr(lane.alloc, "block_tables", None)
    if bm.contiguous or tables is None or bm.final_seq is None:
        return bm
    ids = lane.run_ids
    nb = (lane.alloc.seq_allocated_tokens(ids) // bm.block_size).astype(np.int32)
    tab = tables(ids)
    blocks = tab[np.arange(tab.shape[1])[None, :] < nb[:, None]].astype(np.int32)
    return dataclasses.replace(bm, table_len=nb, table_blocks=blocks)
