"""Both sides of the vLLM tier: vLLM 0.32's scheduler (kvviz/reference/vllm_scheduler.py, in
the vLLM venv's python, one subprocess for many streams) and kvviz's Lane on the same stream,
recorded in one format so a test compares them step by step.

The venv: env KVVIZ_VLLM_VENV, default $HOME/.cache/kvviz/vllm-0.32.0. Missing: the tier
skips with that reason, or fails when KVVIZ_REQUIRE_VLLM=1.
"""
from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import strategies as st

from kvviz.core.config import EngineConfig, LaneSpec
from kvviz.core.workload import Workload
from kvviz.engine.lane import Lane
from kvviz.engine.tokens import token_ids

ROOT = Path(__file__).resolve().parents[2]


def venv_python() -> Path:
    venv = Path(os.environ.get("KVVIZ_VLLM_VENV",
                               Path.home() / ".cache" / "kvviz" / "vllm-0.32.0"))
    py = venv / "bin" / "python"
    if not py.exists():
        msg = f"no vLLM venv at {venv} (set KVVIZ_VLLM_VENV)"
        if os.environ.get("KVVIZ_REQUIRE_VLLM") == "1":
            pytest.fail(msg + "; KVVIZ_REQUIRE_VLLM=1 requires it")
        pytest.skip(msg)
    return py


def workload(arrival_step, prompt, output, chains=None, chain_block: int = 16) -> Workload:
    """A stream whose request i arrives before step arrival_step[i] (steps of 1 s)."""
    n = len(prompt)
    kw = {}
    if chains is not None:
        kw = {"chain_ptr": np.concatenate([[0], np.cumsum([len(c) for c in chains])])
              .astype(np.int64),
              "chain_ids": np.asarray([x for c in chains for x in c], np.int64),
              "chain_block": chain_block}
    order = np.argsort(np.asarray(arrival_step), kind="stable")
    assert (order == np.arange(n)).all(), "give requests in arrival order"
    return Workload(np.asarray(arrival_step, np.float64), np.asarray(prompt, np.int64),
                    np.asarray(output, np.int64), np.full(n, -1, np.int64), **kw)


def case(w: Workload, *, block_size=16, num_blocks=64, max_num_seqs=16,
         max_num_batched_tokens=256, chunked=True, prefix=False, watermark=0.0) -> dict:
    """A reference case for the stream; with prefix caching it also records KV events."""
    final = int((w.prompt + w.output).max())
    reqs = [{"arrival_step": int(w.arrival_s[i]), "prompt": int(w.prompt[i]),
             "tokens": token_ids(w, i, int(w.prompt[i] + w.output[i]))} for i in range(len(w))]
    steps = int(w.arrival_s.max()) + int((w.prompt + w.output).sum()) + 10
    return {"block_size": block_size, "num_blocks": num_blocks, "max_num_seqs": max_num_seqs,
            "max_num_batched_tokens": max_num_batched_tokens,
            "enable_chunked_prefill": chunked, "enable_prefix_caching": prefix,
            "kv_events": prefix,
            "watermark": watermark, "max_steps": steps,
            "max_model_len": max(final + 1, 64) if chunked else max_num_batched_tokens,
            "requests": reqs}


def run_vllm(cases: list[dict]) -> list[dict]:
    """vLLM's records for every case, from one subprocess."""
    py = venv_python()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1",
           "VLLM_LOGGING_LEVEL": "ERROR"}
    p = subprocess.run([str(py), "-m", "kvviz.reference.vllm_scheduler"],
                       input=json.dumps({"cases": cases}), capture_output=True, text=True,
                       env=env, cwd="/tmp", timeout=600)
    if p.returncode:
        raise AssertionError(f"the vLLM reference failed ({p.returncode}): {p.stderr[-3000:]}")
    return json.loads(p.stdout)["results"]


class VllmServer:
    """One vLLM reference process for many cases (`run`), stopped by PID in `close`."""

    def __init__(self) -> None:
        py = venv_python()
        env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1",
               "VLLM_LOGGING_LEVEL": "ERROR"}
        self.err = tempfile.TemporaryFile()
        self.p = subprocess.Popen([str(py), "-m", "kvviz.reference.vllm_scheduler", "--serve"],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=self.err, text=True, env=env, cwd="/tmp")
        hello = self.p.stdout.readline()
        if not hello:
            raise AssertionError(f"the vLLM reference did not start: {self._stderr()}")
        self.version = json.loads(hello)["vllm"]

    def _stderr(self) -> str:
        self.err.seek(0)
        return self.err.read().decode(errors="replace")[-3000:]

    def run(self, c: dict) -> dict:
        self.p.stdin.write(json.dumps(c) + "\n")
        self.p.stdin.flush()
        line = self.p.stdout.readline()
        if not line:
            raise AssertionError(f"the vLLM reference died: {self._stderr()}")
        out = json.loads(line)
        if "error" in out:
            raise AssertionError(f"vLLM refused the case: {out['error']}")
        return out

    def close(self) -> None:
        self.p.stdin.close()
        try:
            self.p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.kill(self.p.pid, 9)
            self.p.wait()
        self.err.close()


def run_kvviz(w: Workload, c: dict) -> dict:
    """kvviz's Lane (the compiled rule) on the stream, recorded as run_case records (block
    ids + 1: vLLM's block 0 is its null block)."""
    bs = c["block_size"]
    spec = LaneSpec("paged", bs, prefix_caching=c["enable_prefix_caching"])
    eng = EngineConfig(max_num_seqs=c["max_num_seqs"],
                       max_batched_tokens=c["max_num_batched_tokens"],
                       watermark=c["watermark"], enable_chunked_prefill=c["enable_chunked_prefill"],
                       step_ms=1000.0, max_seq_len=c["max_model_len"])
    lane = Lane("x", spec, w, eng, c["num_blocks"] * bs)
    pool = lane.alloc.block_pool if c.get("kv_events") else None  # the publisher's source
    if pool is not None:
        pool.start_log()
    arrival = w.arrival_s
    steps = []
    for step in range(1, c["max_steps"] + 1):
        if lane.finished:
            break
        upto = int(np.searchsorted(arrival, float(step), side="right"))
        lane.arrive(upto)
        if lane.idle:
            lane.skip_idle(1, float(step))
            continue
        done_before = lane.done
        lane.step(float(step))
        plan = lane.last_plan
        running = lane.run_ids.tolist()
        fin = [int(r) for r in plan.ids.tolist() if r not in set(running)
               and lane.generated[r] >= w.output[r]]
        assert lane.done - done_before == len(fin)
        kv = [] if pool is None else [["S" if k == "stored" else "R", key]
                                      for k, key, _ in pool.drain_log()]
        steps.append({"step": step, "kv": kv, "running": running,
                      "scheduled": {str(r): int(n) for r, n in zip(plan.ids.tolist(),
                                                                   plan.counts.tolist())},
                      "preempted": sorted(plan.preempted),
                      "finished": fin,
                      "hits": {str(r): int(h) for r, h in zip(plan.admitted, plan.hit_tokens)},
                      "blocks": {str(r): (lane.alloc.block_table(r) + 1).tolist()
                                 for r in running}})
    return {"steps": steps, "queries": lane.prefix_query_tokens,
            "hits": lane.prefix_hit_tokens, "lane": lane}


def assert_same(kv: dict, ref: dict, label: str) -> None:
    """Step by step: the scheduled tokens, preemptions, finishes, hits, running order and
    block ids, and the KV events (the same kinds in the same order, hashes renamed one to
    one); then the totals."""
    a, b = kv["steps"], ref["steps"]
    for x, y in zip(a, b):
        assert x["step"] == y["step"], f"{label}: kvviz stepped {x['step']}, vLLM {y['step']}"
        for k in ("scheduled", "preempted", "hits", "finished", "running", "blocks"):
            assert x[k] == y[k], (f"{label}, step {x['step']}: {k} differ\n kvviz {x[k]}\n"
                                  f" vLLM  {y[k]}")
    assert len(a) == len(b), f"{label}: kvviz {len(a)} steps with work, vLLM {len(b)}"
    names: dict = {}  # vLLM's block hash <-> kvviz's key, one to one over the whole run
    for x, y in zip(a, b):
        assert [k for k, _ in x["kv"]] == [k for k, _ in y["kv"]], (
            f"{label}, step {x['step']}: KV events differ\n kvviz {x['kv']}\n vLLM  {y['kv']}")
        for (_, key), (_, h) in zip(x["kv"], y["kv"]):
            assert names.setdefault(("v", h), tuple(key)) == tuple(key), (label, x["step"])
            assert names.setdefault(("k", tuple(key)), h) == h, (label, x["step"])
    assert (kv["queries"], kv["hits"]) == (ref["queries"], ref["hits"]), label
    lane = kv["lane"]
    assert lane.preemptions == sum(len(y["preempted"]) for y in b), label
    assert lane.done == sum(len(y["finished"]) for y in b) == len(lane.w), label
    assert lane.step_no == b[-1]["step"], label


@st.composite
def streams(draw, *, sizes=(4, 8, 16), most=24, prompt_hi=90, output_hi=50, arrive_hi=12,
            extra_blocks=(40,), seqs_hi=8, budget_hi=200, whole_budget_hi=300,
            watermarks=(0.0, 0.0, 0.05, 0.2), groups=3, chain_modes=(0, 1)):
    """A random stream and its case settings (`case`'s keywords): block size from `sizes`, up
    to `most` requests, caches from just enough to `extra_blocks` more; with prefix caching,
    chain ids from `groups` shared prompts (chain mode 1: one shared block, then the request's
    own; 2: some requests repeat an earlier prompt exactly). The vLLM tier draws the defaults;
    the soak (tests/engine/vllm_soak.py) wider ones."""
    bs = draw(st.sampled_from(sizes))
    n = draw(st.integers(1, most))
    prefix, chunked = draw(st.booleans()), draw(st.booleans())
    prompt = draw(st.lists(st.integers(1, prompt_hi), min_size=n, max_size=n))
    output = draw(st.lists(st.integers(1, output_hi), min_size=n, max_size=n))
    arrival = sorted(draw(st.lists(st.integers(1, arrive_hi), min_size=n, max_size=n)))
    chains = None
    if prefix:  # chain ids drawn from a small pool, so prompts share leading blocks
        chains = [[draw(st.integers(0, groups - 1)) * 10 + j for j in range(-(-p // 16))]
                  for p in prompt]
        mode = draw(st.sampled_from(chain_modes))
        for i in range(n):
            if mode == 1:
                chains[i] = chains[i][:1] + [1000 + 100 * i + j
                                             for j in range(len(chains[i]) - 1)]
            elif mode == 2 and i and draw(st.booleans()):
                k = draw(st.integers(0, i - 1))
                prompt[i], chains[i] = prompt[k], list(chains[k])
    w = workload(arrival, prompt, output, chains)
    need = max(-(-(p + o - 1) // bs) for p, o in zip(prompt, output))
    blocks = need + draw(st.integers(0, draw(st.sampled_from(extra_blocks))))
    seqs = draw(st.integers(1, seqs_hi))
    budget = (draw(st.integers(max(8, seqs), budget_hi)) if chunked
              else draw(st.integers(max(seqs, *(p + o + 1 for p, o in zip(prompt, output))),
                                    whole_budget_hi)))  # vLLM: >= max_num_seqs, max_model_len
    return w, {"block_size": bs, "num_blocks": blocks, "max_num_seqs": seqs,
               "max_num_batched_tokens": budget, "chunked": chunked, "prefix": prefix,
               "watermark": draw(st.sampled_from(watermarks))}
