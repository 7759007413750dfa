"""kvviz's own publisher (the engine's paged prefix lane) -> the subscriber: identical blocks."""
from __future__ import annotations

import pytest

from kvviz.core.config import CacheConfig, LaneSpec, WorkloadConfig
from kvviz.core.workload import generate
from kvviz.engine import Simulation
from kvviz.node.kvevents.engine_source import LanePublisher, cached_prefix_keys
from kvviz.node.kvevents.publisher import Publisher
from kvviz.node.kvevents.subscriber import Subscriber, SubscriberConfig
from tests.kvevents.conftest import drain, free_base_port, wait_connected


@pytest.mark.parametrize("fmt", ["vllm", "sglang"])
def test_engine_events_round_trip_with_identical_block_sets(fmt):
    port = free_base_port(2)
    ep, rp = f"tcp://127.0.0.1:{port}", f"tcp://127.0.0.1:{port + 1}"
    wl = generate(WorkloadConfig(num_requests=300, rate=float("inf"), prefix_share=0.8,
                                 prefix_tokens=96, prefix_groups=6, max_seq_len=512, seed=3))
    sim = Simulation(wl, [LaneSpec.parse("paged:16:prefix")], CacheConfig(capacity_tokens=4096))
    lp = LanePublisher(Publisher(ep, rp, fmt), 16)
    sub = Subscriber(SubscriberConfig((ep,), replay=(rp,)))
    try:
        wait_connected(sub)
        removed = 0
        while not sim.finished:
            for _ in range(5):
                sim.step()
            lp.follow(sim.lanes[0].alloc)
            sub.poll(0)
        removed = sum(s.removed_blocks for s in sub.streams)
        drain(sub, lambda: sub.streams[0].last_seq == lp.pub.seq - 1)
        (f,) = sub.model.forests.values()
        assert set(f.parent) == lp.cached_hashes() and f.parent
        keys = cached_prefix_keys(sim.lanes[0].alloc)  # and both are the allocator's cache
        assert lp.cached_hashes() == {lp.hash_of(k) for k in keys}
        assert removed > 0  # the load evicts cached prefixes: both kinds of event were sent
        assert sub.streams[0].encoding == ("map" if fmt == "vllm" else "array")
    finally:
        sub.close()
        lp.pub.close()
