"""tests/viz: figure builders on BlockMaps made by the real allocators and engine."""
from __future__ import annotations

import numpy as np
import pytest

from kvviz.core.blockmap import FREE, BlockMap
from kvviz.core.config import CacheConfig, LaneSpec, WorkloadConfig
from kvviz.core.workload import generate
from kvviz.engine import Simulation


@pytest.fixture(scope="session")
def sim_maps() -> dict[str, BlockMap]:
    """Block maps of three lanes mid-run: contiguous, paged, paged with prefix sharing."""
    w = generate(WorkloadConfig("sharegpt-like", num_requests=400, rate=60, prefix_share=0.6,
                                prefix_tokens=64, seed=1))
    lanes = [LaneSpec.parse(x) for x in ("contiguous:first-fit:max", "paged:16",
                                         "paged:16:prefix")]
    sim = Simulation(w, lanes, CacheConfig(capacity_tokens=32768))
    for _ in range(300):
        sim.step()
    return {ln.name: ln.snapshot() for ln in sim.lanes}


@pytest.fixture(scope="session")
def million() -> BlockMap:
    """1M blocks: random owners, fills, shares and cached-free blocks."""
    n = 1 << 20
    rng = np.random.default_rng(0)
    owner = np.where(rng.random(n) < 0.3, FREE, rng.integers(0, 5000, n)).astype(np.int32)
    owned = owner != FREE
    return BlockMap(owner, np.where(owned, rng.integers(0, 17, n), 0).astype(np.int32),
                    np.where(owned, 16, 0).astype(np.int32),
                    np.where(owned, rng.integers(1, 3, n), 0).astype(np.int16),
                    ~owned & (rng.random(n) < 0.2), 16, 0, "paged:16", False)
