"""The block-pool plugin's scenario (tests/real_vllm/test_blocks.py): the tier's one server
runs with kvviz's plugin on, sampling every engine step (conftest.py). A `kvviz attach
--blocks` records it while a load preempts and fills the prefix cache; what vLLM itself said
in the same run (its /metrics counters, its KV-event replay buffer) is kept beside the
recording."""
from __future__ import annotations

import random
import threading
import time

import pytest

from tests.real_vllm import clients as cl
from tests.real_vllm import groundtruth as gt


def _lane_rows(path):
    from kvviz.store.reader import RunReader

    r = RunReader(path)
    try:
        return r.samples()
    finally:
        r.close()


def wait_for(pred, most_s: float = 60.0) -> bool:
    end = time.monotonic() + most_s
    while time.monotonic() < end:
        try:
            if pred():
                return True
        except Exception:  # noqa: BLE001 (not written yet: ask again)
            pass
        time.sleep(0.25)
    return False


def load(srv, rng: random.Random, tries: int = 3) -> None:
    """Shared prefixes, one request at a time (cached blocks), then bursts of 4 prompts of 19
    blocks for 71 usable blocks until vLLM has preempted (at most `tries` bursts)."""
    m0 = gt.one(gt.metrics(srv.metrics_text()), "vllm:num_preemptions_total")
    system = [rng.randrange(3, 500) for _ in range(100)]
    for _ in range(4):
        srv.complete(system + [rng.randrange(3, 500) for _ in range(40)], 4)
    for _burst in range(tries):
        longs = [[rng.randrange(3, 500) for _ in range(600)] for _ in range(4)]
        ths = [threading.Thread(target=srv.complete, args=(p, 300)) for p in longs]
        for t in ths:
            t.start()
        for t in ths:
            t.join(300)
        if gt.one(gt.metrics(srv.metrics_text()), "vllm:num_preemptions_total") > m0:
            break


def record(srv, out, rng: random.Random) -> dict:
    """`kvviz attach --blocks` records the node while `load` runs; what vLLM itself said in
    the same run beside it (its preemption counter, usage, KV-event replay buffer)."""
    srv.post("/reset_prefix_cache")  # the KV-event truth below starts from an empty cache
    m0 = gt.metrics(srv.metrics_text())
    proc = cl.attach(srv, out, "--blocks", srv.blocks)
    res: dict = {"path": out}
    try:
        assert wait_for(lambda: len(_lane_rows(out)) > 0), "no block-stream sample recorded"
        load(srv, rng)
        m1 = gt.metrics(srv.metrics_text())
        res["preemptions"] = (gt.one(m1, "vllm:num_preemptions_total")
                              - gt.one(m0, "vllm:num_preemptions_total"))
        res["truth"] = gt.rebuild(gt.replay_all(srv.replay))
        res["usage_end"] = gt.one(m1, "vllm:kv_cache_usage_perc")
        # idle: the plugin's last sample is repeated; wait until the recording has it
        assert wait_for(lambda: _lane_rows(out).iloc[-1]["running"] == 0)
        time.sleep(1.5)
    finally:
        res["attach"] = cl.stop(proc)
    return res


@pytest.fixture(scope="session")
def blocks_run(vllm_server, tmp_path_factory):
    """The recording test_blocks.py checks and test_twin_real.py replays (one per session)."""
    return record(vllm_server, tmp_path_factory.mktemp("blocks") / "blocks.db",
                  random.Random(39))
