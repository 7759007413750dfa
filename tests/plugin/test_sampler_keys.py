"""When the sampler sends whole block tables (a key message) and when only each long table's
new ids (kvviz/plugin/sampler.py, wire 2), on a stand-in scheduler and pool: every
KVVIZ_BLOCKS_KEY_EVERY-th message, and the message after one the publisher dropped (its
queue full, or its socket), so that a subscriber never waits on a message it cannot rebuild
for longer than that. (With vLLM: benchmarks/bench_plugin.py's check, in the vLLM tier.)"""
from __future__ import annotations

import types
from collections import deque

from kvviz.plugin import wire
from kvviz.plugin.sampler import PoolSampler, Settings
from tests.plugin.test_pool_mirror import Pool


class Publisher:
    def __init__(self) -> None:
        self.dropped = 0
        self.full = False
        self.sent: list[dict] = []

    def offer(self, msg: dict) -> bool:
        if self.full:
            self.dropped += 1
            return False
        self.sent.append(msg)
        return True


def scheduler(pool: Pool, tables: dict) -> types.SimpleNamespace:
    mgr = types.SimpleNamespace(req_to_blocks=tables, num_cached_block={})
    coord = types.SimpleNamespace(single_type_managers=[mgr], block_pool=pool,
                                  get_num_blocks_to_allocate=lambda *a, **kw: 0)
    pool.reset_prefix_cache = lambda: True
    kvm = types.SimpleNamespace(coordinator=coord, allocate_slots=lambda *a, **kw: None)
    req = types.SimpleNamespace(num_computed_tokens=16, num_prompt_tokens=16, max_tokens=64)
    return types.SimpleNamespace(kv_cache_manager=kvm, block_size=16, current_step=0,
                                 requests={rid: req for rid in tables}, max_model_len=4096,
                                 running=[], kv_holding_waiting=deque(), waiting=deque(),
                                 deferred_waiting=set())


def test_key_messages_come_every_n_and_right_after_a_drop():
    pool = Pool(400)
    tables = {"a": pool.get_new_blocks(40), "b": pool.get_new_blocks(3)}  # long, short
    sched = scheduler(pool, tables)
    pub = Publisher()
    k = PoolSampler(sched, Settings({"KVVIZ_BLOCKS_ENDPOINT": "ipc:///x",
                                     "KVVIZ_BLOCKS_KEY_EVERY": "3"}), pub,
                    {"pool": {"num_blocks": 400, "block_size": 16}, "waiting_status": (),
                     "running_status": None})
    k.seq_of.update(a=0, b=1)
    got, whole, n = [], wire.Tables(), 0
    lost = False  # a message since the last one rebuilt never reached the subscriber

    def sample(drop: bool = False, socket_drop: bool = False) -> None:
        nonlocal n, lost
        tables["a"] += pool.get_new_blocks(2)  # the long table grows between samples
        sched.current_step += 1
        pub.full = drop
        sent = len(pub.sent)
        k.sample()
        n += 1
        if len(pub.sent) == sent:
            got.append("dropped")
            lost = True
            return
        msg = pub.sent[-1]
        got.append(msg["key"])
        if socket_drop:  # taken, then lost in the publisher's socket
            pub.dropped += 1
            lost = True
            return
        _, back = wire.decode(wire.frames(n, wire.encode(msg)))
        assert whole.whole(n, back) == (msg["key"] or not lost)
        if msg["key"] or not lost:
            assert back["blocks"].tolist() == [b.block_id for t in tables.values() for b in t]
            lost = False

    for _ in range(4):
        sample()
    sample(drop=True)  # the queue was full: the next message is key
    sample()
    sample(socket_drop=True)  # the socket lost one: the next message is key
    sample()
    sample()
    sample()
    assert got == [True, False, False, True, "dropped", True, False, True, False, False]
    # a message between keys carries the long table's new ids only, the short one whole
    lens = [m["lens"].tolist() for m in pub.sent]
    bases = [m["base"].tolist() for m in pub.sent]
    assert bases[1] == [lens[0][0], 0] and pub.sent[1]["blocks"].size == 2 + 3
