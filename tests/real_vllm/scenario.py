"""The scenario the real-vLLM tier drives (one run per module, shared by its tests):
shared-prefix requests one at a time (each response's cached_tokens against the hit kvviz's
forest predicts just before it), evictions, a burst that preempts, a queue that waits for
capacity, a lost batch that replay fills, a prefix-cache reset, then a subscriber and
`kvviz attach` runs that join late (one whose stream loses three live batches). /metrics is
sampled all along. Everything it saw is returned for tests/real_vllm/test_real_vllm.py."""
from __future__ import annotations

import os
import random
import signal
import threading
import time

import pytest

from kvviz.commands.cli import main
from kvviz.node.promtext import sample_from_text
from tests.real_vllm import clients as cl
from tests.real_vllm import groundtruth as gt


def _metrics(srv):
    text = srv.metrics_text()
    return text, gt.metrics(text)


IDLE_COUNTERS = {"prefix_hits_total": "vllm:prefix_cache_hits_total",
                 "prefix_queries_total": "vllm:prefix_cache_queries_total",
                 "preemptions_total": "vllm:num_preemptions_total"}


def caught_up(srv, *paths, most_s: float = 90.0) -> None:
    """Poll until each `kvviz attach` recording in `paths` holds vLLM's whole prefix forest
    (as its replay buffer rebuilds it) and has scraped /metrics since vLLM went idle (its
    newest scrape shows the counters /metrics shows now, nothing running or waiting): a
    loaded machine delays both more than any fixed wait. At most most_s; the tests then
    say what differs."""
    from kvviz.store.reader import RunReader

    _text, m = _metrics(srv)
    truth = gt.rebuild(gt.replay_all(srv.replay))
    want = {col: gt.one(m, name) for col, name in IDLE_COUNTERS.items()}
    left, end = list(paths), time.monotonic() + most_s
    while left and time.monotonic() < end:
        path = left[0]
        try:
            r = RunReader(path)
            try:
                rows = r.node_samples(last=1)
            finally:
                r.close()
            done = (len(rows) and all(rows.iloc[-1][c] == v for c, v in want.items())
                    and rows.iloc[-1]["num_running"] == 0 and rows.iloc[-1]["num_waiting"] == 0
                    and cl.recorded_forest(path) == truth)
        except Exception:  # noqa: BLE001 (not written yet, or mid-write: ask again)
            done = False
        if done:
            left.pop(0)
        else:
            time.sleep(0.25)


@pytest.fixture(scope="module")
def run(vllm_server, tmp_path_factory):
    srv = vllm_server
    wd = tmp_path_factory.mktemp("tier")
    rng = random.Random(22)
    res: dict = {"pairs": [], "metric_checks": [], "wd": wd, "cpus": srv.cpus, "srv": srv}
    early = cl.attach(srv, wd / "attach-early.db")
    s1, s3 = cl.subscriber(srv), cl.subscriber(srv, cl.Lossy)
    try:
        cl.sync(s1, s3, quiet_s=1.0)

        def ask(prompt, max_tokens=2, subs=(s1,)):
            cl.sync(s1, s3, *subs)
            predicted = [s.model.prefix_hit_tokens(s.streams[0].sid, prompt) for s in subs]
            usage = srv.complete(prompt, max_tokens)["usage"]
            res["pairs"].append((predicted, usage["prompt_tokens_details"]["cached_tokens"]))
            cl.holds(subs, [s for s in (s1, s3) if s not in subs], prompt)
            return usage

        def check_metrics(label):
            text, m = _metrics(srv)
            res["metric_checks"].append((label, sample_from_text(text, url=srv.metrics_url,
                                                                 time=time.time()), m))

        # /metrics all along, also between the phases' own scrapes (which catch requests
        # running and waiting only because the engine core shares its worker's CPUs: cpus.py)
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
                cl.sync(s1, s3)
                seq_at_drop = s1.streams[0].last_seq
                s3.drop = {seq_at_drop + k for k in (1, 2, 3)}
            u = ask(p)
            sent += u["prompt_tokens"]
        cl.sync(s1, s3)
        _text, m1 = _metrics(srv)
        res["seq_phase"] = {
            "queries": gt.one(m1, "vllm:prefix_cache_queries_total") - q0,
            "hits": gt.one(m1, "vllm:prefix_cache_hits_total") - h0,
            "prompt_tokens": sent, "cached_tokens": sum(c for _, c in res["pairs"])}
        check_metrics("idle after the sequential phase")

        # 2. a burst that preempts: 4 prompts of 19 blocks for 71 usable blocks, so one waits
        # for capacity, and the 3 admitted decode into a full cache; /metrics meanwhile.
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
            cl.sync(s1, s3)
            _text, m2 = _metrics(srv)
            if gt.one(m2, "vllm:num_preemptions_total") > pre0:
                break
        res["preemptions"] = gt.one(m2, "vllm:num_preemptions_total") - pre0
        res["bursts"] = burst + 1
        check_metrics("idle after the burst")
        # a queue: one request of 41 blocks decodes alone (to 63 blocks) while a second of 41
        # blocks waits for capacity (71 usable); /metrics meanwhile
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
        cl.sync(s1, s3)

        # 3. reset the prefix cache: everything cleared, the next hit is 0, then back
        res["before_reset_blocks"] = len(cl.forest(s1))
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
        late_attach = cl.attach(srv, wd / "attach-late.db")
        s2 = cl.subscriber(srv)
        cl.sync(s1, s2, s3, quiet_s=1.0)
        for p in prompts[4:8]:
            ask(p, subs=(s1, s2))
        cl.sync(s1, s2, s3, quiet_s=1.0)

        # 5. kvviz attach (in this process, the same code) whose stream loses three live
        # batches on the way: the gap is filled from vLLM's replay buffer. The attach runs
        # until the load is over and the stream quiet (then this process sends itself the
        # SIGTERM the attach stops on), not for a fixed time that a loaded machine outlasts.
        attach_done = threading.Event()

        def load_then_stop() -> None:
            for p in prompts[8:18]:
                ask(p)
            cl.sync(s1, s2, s3, quiet_s=1.0)
            caught_up(srv, wd / "attach-gap.db")
            if not attach_done.is_set():
                os.kill(os.getpid(), signal.SIGTERM)

        load = threading.Thread(target=load_then_stop)
        from kvviz.commands import attach as attach_cmd  # noqa: F401 (imported before patching)
        from kvviz.node.kvevents import subscriber as submod

        real = submod.Subscriber
        submod.Subscriber = cl.LossyLive
        try:
            load.start()
            res["gap_attach"] = (main(["attach", srv.metrics_url, "--kv-events", srv.events,
                                       "--replay", srv.replay, "--topic", "kv-events",
                                       "--interval", "1", "--duration", "240", "--quiet",
                                       "--out", str(wd / "attach-gap.db")]), "")
        finally:
            attach_done.set()
            submod.Subscriber = real
            load.join(120)
        cl.sync(s1, s2, s3, quiet_s=1.0)
        caught_up(srv, wd / "attach-early.db", wd / "attach-late.db")
        sampling.set()
        sampler_th.join(60)
        check_metrics("idle at the end")
        _text, m_end = _metrics(srv)
        res["late_attach"] = cl.stop(late_attach)
        res["early_attach"] = cl.stop(early)
        batches = gt.replay_all(srv.replay)
        res["truth"] = gt.rebuild(batches)
        res["m_end"] = m_end
        cl.reached(max(seq for seq, _ in batches), s1, s2, s3)
        res["subs"] = {name: (s.summary()[0], cl.forest(s))
                       for name, s in (("s1", s1), ("s2", s2), ("s3", s3))}
        res["s2_first_live"] = s2.streams[0].replayed_batches
        res["seq_at_drop"] = seq_at_drop
    finally:
        if "sampling" in locals():
            sampling.set()
        for p in (early, locals().get("late_attach")):
            if p is not None and p.poll() is None:
                p.kill()
        for sub in (s1, s3, locals().get("s2")):
            if sub is not None:
                sub.close()
    return res
