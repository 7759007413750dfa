"""What-if's memory by totals (kvviz/twin/memory.py): the count of configurations at once."""
from __future__ import annotations

import pytest

from kvviz.core.errors import KvvizError
from kvviz.settings import memory
from kvviz.twin.memory import fit_workers
from kvviz.twin.settings import NodeSettings

MB = 1 << 20


def _configs(*blocks: int) -> list[NodeSettings]:
    return [NodeSettings(block_size=1, num_gpu_blocks=b) for b in blocks]


def _worker(blocks: int, requests: int) -> int:
    """One worker's share: its pool's metadata, the stream, an interpreter."""
    return (blocks - 1) * memory.PAGED_BLOCK_BYTES + requests * memory.REQUEST_BYTES \
        + memory.BASE_BYTES


def test_all_workers_when_they_fit():
    assert fit_workers(_configs(1025, 2049), 100, 2, budget_mb=10_000) == (2, None)


def test_the_largest_pools_decide_how_many_run_at_once():
    configs = _configs(1 << 20, 1 << 19, 1 << 21, 1 << 18)
    parent = 1000 * memory.REQUEST_BYTES + memory.BASE_BYTES
    two = parent + _worker(1 << 21, 1000) + _worker(1 << 20, 1000)  # the two largest
    budget = (two + MB) / MB  # room for the two largest, not for a third
    workers, note = fit_workers(configs, 1000, 4, budget_mb=budget)
    assert workers == 2 and note.startswith("running 2 configurations at a time, not 4")
    workers, note = fit_workers(configs, 1000, 4, budget_mb=(two - MB) / MB)
    assert workers == 1 and "running 1 configuration at a time" in note


def test_a_configuration_that_alone_does_not_fit_is_one_error_naming_the_limit():
    with pytest.raises(KvvizError, match="limit of 100 MB"):
        fit_workers(_configs(1025, 1 << 20), 10, 2, budget_mb=100)
    with pytest.raises(KvvizError, match="the largest configuration's block metadata"):
        fit_workers(_configs(1 << 20), 10, 1, budget_mb=100)


def test_the_machine_bounds_a_budget_larger_than_it_has():
    configs = _configs(1 << 23, 1 << 23)
    # 1,280 MB of metadata each: a 100 GB budget on a 1 GiB machine is refused
    with pytest.raises(KvvizError, match="available now"):
        fit_workers(configs, 10, 2, budget_mb=100_000, available=1 << 30)
