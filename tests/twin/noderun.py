"""Synthetic `kvviz attach --blocks` recordings for the twin's fast tests: a run of the rule,
written as the plugin's lane would be (docs/FORMAT.md, "A node's block pool as a lane"):
run.meta's engine and blocks, a sample after every step (and the plugin's step-0 sample and
a sample when the engine runs dry), maps with block tables (address = vLLM id - 1), the
admitted / preempted / finished / admit_failed events, and the request log with each
prompt's hash chain. Written with the store's own writer; the real plugin's recordings are
tested in tests/real_vllm/test_twin_real.py."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from kvviz.core.config import WorkloadConfig
from kvviz.core.metrics import compute
from kvviz.core.workload import generate
from kvviz.engine import Simulation
from kvviz.engine.eventlog import KIND_CODE, EventColumns
from kvviz.store import blocklane
from kvviz.store.writer import RunWriter
from kvviz.twin.record import _with_tables
from kvviz.twin.settings import NodeSettings
from tests.twin.streams import MODEL

KINDS = ("admitted", "preempted", "finished", "admit_failed")
SETTINGS = NodeSettings(16, 97, 8, 256, True, 0.0, True)


def workload(n: int = 40, seed: int = 5, spread: int = 60):
    """n requests with shared prefixes (chains of 16-token blocks), arriving at integer
    steps 1..spread (1 s steps: the recording's clock)."""
    w = generate(WorkloadConfig(num_requests=n, rate=1.0, prefix_share=0.6, seed=seed,
                                max_seq_len=400))
    rng = np.random.default_rng(seed)
    steps = np.sort(rng.integers(1, spread + 1, n)).astype(np.float64)
    return dataclasses.replace(w, arrival_s=steps)


def hashes(w, r: int, bs: int) -> bytes:
    """Request r's prompt hash chain at block size bs (= the chains' block): its chain ids
    where the chain covers a block, ids of its own beyond (unique per request and block)."""
    chain = w.chain(r)
    out = [int(chain[j]) if j < chain.size else 10**12 + r * 10**4 + j
           for j in range(int(w.prompt[r]) // bs)]
    return b"".join(x.to_bytes(8, "little") for x in out)


def write(path: Path, w=None, settings: NodeSettings = SETTINGS, *, stop_at: int | None = None,
          dry_samples: bool = True, first_sample: bool = True, seq_offset: int = 0,
          perm: np.ndarray | None = None) -> Path:
    """The rule's run of `w` at `settings` as an attach recording at `path` (a new file);
    `stop_at`: the recording ends after that engine step (later requests still running or
    unannounced); `dry_samples` / `first_sample`: the samples the plugin takes when the
    engine runs dry and when it starts; `seq_offset`: the plugin numbered that many requests
    before this log; `perm`: the node's block addresses are perm[the rule's]."""
    w = workload() if w is None else w
    bs = settings.block_size
    sim = Simulation(w, [settings.lane()], settings.cache(MODEL),
                     settings.engine(1000.0, int(w.final_len.max())), advance="step")
    lane = sim.lanes[0]
    pool = {"num_blocks": settings.num_gpu_blocks, "block_size": bs, "engine": "vllm",
            "version": "0.32.0", "dp_rank": 0, "scheduler": "Scheduler",
            "chunked_prefill": settings.enable_chunked_prefill,
            "prefix_caching": settings.enable_prefix_caching,
            "max_num_seqs": settings.max_num_seqs,
            "max_num_batched_tokens": settings.max_num_batched_tokens,
            "max_model_len": 4096, "watermark": settings.watermark, "bytes_per_token": 64}
    writer = RunWriter(path, {"mode": "node", "device": "cpu", "lanes": []})
    blocklane.register_lane(writer.conn, {"name": "vllm", "label": "vLLM 0.32.0 paged",
                                          "allocator": "paged", "block_size": bs,
                                          "capacity_tokens": settings.capacity_tokens,
                                          "num_blocks": settings.usable_blocks},
                            {"enable_chunked_prefill": settings.enable_chunked_prefill,
                             "max_num_seqs": settings.max_num_seqs,
                             "max_num_batched_tokens": settings.max_num_batched_tokens,
                             "max_model_len": 4096, "watermark": settings.watermark},
                            {"endpoint": "ipc://test", "pool": pool})
    announced, cursor, finish = 0, 0, {}

    def sample(step: int) -> None:
        bm = _with_tables(lane, lane.snapshot())
        bm = dataclasses.replace(bm, final_seq=bm.final_seq + seq_offset,
                                 owner=np.where(bm.owner >= 0, bm.owner + seq_offset, -1))
        if perm is not None:
            bm = dataclasses.replace(bm, table_blocks=perm[bm.table_blocks].astype(np.int32))
        writer.add_sample(float(step), step, "vllm", {
            **compute(bm).as_dict(), "running": int(lane.run_ids.size),
            "waiting": int(lane.waiting_count), "refcount_mismatches": 0, "untabled_blocks": 0,
            "vllm_free_blocks": int(np.count_nonzero(bm.owner < 0)), "stream_dropped": 0,
            "head_seq": -1, "head_reason": "", "head_need_tokens": 0, "head_free_tokens": 0,
            "waiting_reasons": "{}"}, bm)

    if first_sample:
        sample(0)
    while not sim.finished and (stop_at is None or sim.step_no < stop_at):
        idle = sim._idle_steps()
        if idle > 0:
            if dry_samples:
                sample(sim.step_no)  # the engine ran dry
            sim.skip_idle(idle)
        nxt = sim.step_no + 1
        upto = int(np.searchsorted(w.arrival_s, float(nxt), side="right"))
        if upto > announced:
            blocklane.add_arrivals(writer.conn, "vllm", float(nxt), [
                [r + seq_offset, f"req-{r}", nxt, int(w.prompt[r]), int(w.output[r]),
                 hashes(w, r, bs), 8] for r in range(announced, upto)])
            announced = upto
        sim.step()
        ev, cursor = sim.events.since(cursor)
        keep = np.isin(ev["kind"], [KIND_CODE[k] for k in KINDS])
        cols = {k: v[keep].copy() for k, v in ev.cols.items()}
        cols["seq_id"] += seq_offset
        cols["lane"][:] = 0
        writer.add_events(EventColumns(cols, ("vllm",)))
        done = cols["kind"] == KIND_CODE["finished"]
        finish.update(zip(cols["seq_id"][done].tolist(), cols["step"][done].tolist()))
        sample(sim.step_no)
        writer.commit()
    blocklane.add_finishes(writer.conn, "vllm", [
        [r, s, int(w.output[r - seq_offset]), "FINISHED_LENGTH_CAPPED", 0]
        for r, s in finish.items()])
    writer.commit()
    writer.close("finished")
    return path
