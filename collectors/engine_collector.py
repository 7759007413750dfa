"""Run the engine live and record it: lanes, block maps, metrics, events, device memory.

Arrivals follow wall time since the start (Simulation.step(time_s=...)). Every 1/hz seconds
the engine thread copies each lane's BlockMap and counters plus the new events and hands
them to the store's writer process (collectors/writer_client.py, collectors/writer_process.py).
With `loop`, an exhausted workload restarts as a fresh seeded stream; sequence ids then
continue where the previous stream ended (offset by its size) so ids stay unique within a run,
and each lane's `step` continues from the previous stream's last step (monotonic in a run).
"""
from __future__ import annotations

import dataclasses
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from collectors import torch_memory
from collectors.pause import Pause
from collectors.sample import COUNTER_KEYS, Batch, LaneSample, lane_counters, with_tables
from collectors.writer_client import Hook, SampleWriter, StoreSpec
from kvviz.core.blockmap import FREE
from kvviz.core.config import CacheConfig, EngineConfig, ModelShape, WorkloadConfig
from kvviz.core.workload import Workload, generate
from kvviz.engine import Simulation
from kvviz.engine.eventlog import EventColumns
from kvviz.engine.lane import Lane
from kvviz.node.nvml import NvmlProbe
from kvviz.runs import control, lifecycle
from kvviz.settings.collector import CollectorConfig
from kvviz.store.writer import RunWriter

NVML_UNUSED = "sim mode on the CPU: no GPU is read (NVML is probed in real mode or on cuda)"
EVENT_TRIM = 65536  # drop consumed events from the engine's in-memory log past this many


@dataclasses.dataclass(frozen=True)
class Resolved:
    """What one run's settings leave open, resolved (collectors/launch.py `build`): the device
    present, the model shape, the records the engine takes, the trace read and the output
    path checked. Every setting itself stays in the CollectorConfig, unchanged."""

    out: Path
    device: str  # "cpu" | "cuda" (never "auto")
    model: ModelShape
    cache: CacheConfig
    engine: EngineConfig
    workload: WorkloadConfig | None  # a synthetic stream, or
    trace: Workload | None = None  # a loaded trace (then `workload` is None)


class EngineCollector:
    def __init__(self, settings: CollectorConfig, resolved: Resolved,
                 kv_factory: Callable | None = None) -> None:
        self.settings = settings  # as the flags, the config file or the dashboard gave them
        self.resolved = resolved
        self.kv_factory = kv_factory  # real mode: allocator -> RealKV
        self.hooks: list[Hook] = []  # each called with every sample record (engine thread)
        self.sim_hooks: list[Callable] = []  # (sim, t) before each sample (kv-events publisher)
        self.kv_rows: list[tuple] = []  # published KV-event batches, recorded with the sample
        self.stop_reason: str | None = None
        self.loop_no = 0
        self.sim = self._new_sim()  # validates lanes/capacity before any file exists
        self.nvml = (NvmlProbe() if resolved.device.startswith("cuda")
                     or settings.mode == "real" else None)
        self._base = {ln.name: dict.fromkeys(COUNTER_KEYS, 0) for ln in self.sim.lanes}
        self._step_base = {ln.name: 0 for ln in self.sim.lanes}  # --loop: earlier streams' steps
        self._seq_offset = 0
        self._loop_t0 = 0.0
        self._cursor = 0
        self._last_tok: dict[str, tuple[float, int]] = {}
        self._auditors: dict[str, object] = {}  # lane name -> kvviz.kv.audit.Auditor

    def _workload(self) -> Workload:
        r = self.resolved
        if r.trace is not None:
            return r.trace
        assert r.workload is not None
        return generate(dataclasses.replace(r.workload, seed=r.workload.seed + self.loop_no))

    def _new_sim(self) -> Simulation:
        w = self._workload()
        sim = Simulation(w, list(self.settings.lanes), self.resolved.cache, self.resolved.engine,
                         kv_factory=self.kv_factory)
        for ln in sim.lanes:  # shared system prompts write one content (audit: prefix blocks)
            if hasattr(ln.kv, "bind_workload"):
                ln.kv.bind_workload(w)
        self._auditors = {}
        return sim

    def meta(self) -> dict:
        c, r = self.settings, self.resolved
        lanes = [{"name": ln.name, "label": ln.spec.label, "allocator": ln.spec.allocator,
                  "block_size": ln.alloc.block_size, "capacity_tokens": ln.capacity,
                  "num_blocks": ln.capacity // ln.alloc.block_size,
                  "bytes_per_token": r.model.kv_bytes_per_token} for ln in self.sim.lanes]
        wl = (dataclasses.asdict(r.workload) if r.workload else
              {"trace": c.trace or "", "num_requests": len(self.sim.workload)})
        wl = {k: (None if isinstance(v, float) and not np.isfinite(v) else v)
              for k, v in wl.items()}  # JSON has no inf: rate=None means all at once
        return {"mode": c.mode, "device": r.device,
                "model": {**dataclasses.asdict(r.model),
                          "kv_bytes_per_token": r.model.kv_bytes_per_token},
                "cache": {"capacity_tokens": r.cache.capacity_tokens}, "workload": wl,
                "engine": dataclasses.asdict(r.engine), "lanes": lanes,
                "collector": {"hz": c.hz, "steps_per_s": c.steps_per_s, "loop": c.loop,
                              "duration_s": c.duration,  # the run's length (--duration)
                              "max_steps": c.max_steps},
                "nvml": ({"status": "not used", "reason": NVML_UNUSED} if self.nvml is None
                         else {"status": self.nvml.status, "reason": self.nvml.reason}),
                "versions": versions(c.mode), "started_unix": time.time()}

    # ---- sampling ---------------------------------------------------------------------------
    def _audit(self, lane: Lane, bm) -> dict:
        """Audit counts and the first failures of this lane's pools (real mode, --audit)."""
        auditor = self._auditors.get(lane.name)
        if auditor is None:
            from kvviz.kv.audit import Auditor

            auditor = self._auditors[lane.name] = Auditor(lane.kv)
        res = auditor.audit(lane.run_ids, lane.run_len, bm, id_offset=self._seq_offset)
        return {"audit_checks": res.checks, "audit_failures": res.failed,
                "audit_events": [tuple(f) for f in res.failures]}

    def _lane_sample(self, lane: Lane, t: float) -> LaneSample:
        bm = with_tables(lane, lane.snapshot())
        extra = {}
        if self.settings.audit and lane.kv is not None:
            extra.update(self._audit(lane, bm))
        off = self._seq_offset
        if off:
            owner = np.where(bm.owner == FREE, FREE, bm.owner + off).astype(np.int32)
            bm = dataclasses.replace(bm, owner=owner, final_seq=bm.final_seq + off)
        base = self._base[lane.name]
        cnt = {k: v + base[k] for k, v in lane_counters(lane).items()}
        t_prev, tok_prev = self._last_tok.get(lane.name, (0.0, 0))
        tok = cnt["tokens_generated"]
        cnt["tokens_per_s"] = (tok - tok_prev) / (t - t_prev) if t > t_prev else 0.0
        self._last_tok[lane.name] = (t, tok)
        cnt["running"] = int(lane.run_ids.size)
        cnt["waiting"] = int(lane.waiting_count)
        cnt.update(extra)
        return LaneSample(lane.name, lane.step_no + self._step_base[lane.name], cnt, bm)

    def _new_events(self) -> EventColumns:
        log = self.sim.events
        evs, self._cursor = log.since(self._cursor)
        if self._cursor - log.oldest > EVENT_TRIM:  # a day-long run keeps no old events
            log.trim(self._cursor)
        if self._seq_offset or self._loop_t0:
            evs = evs.shifted(self._loop_t0, self._seq_offset)
        if self.loop_no and len(evs):  # steps continue across streams, as the samples' do
            base = np.array([self._step_base.get(name, 0) for name in evs.lanes], np.int64)
            evs = EventColumns({**evs.cols, "step": evs["step"] + base[evs["lane"]]}, evs.lanes)
        return evs

    def _device(self) -> Callable[[], list[dict]]:
        kvs = [ln.kv for ln in self.sim.lanes]
        nvml, device = self.nvml, self.resolved.device

        def read() -> list[dict]:
            mine = torch_memory.sample(device, kvs)
            rows = nvml.sample() if nvml is not None else [{"device_index": -1,
                                                            "nvml_status": "not used (sim mode)",
                                                            "nvml_reason": NVML_UNUSED}]
            return [{**r, **mine} for r in rows]
        return read

    def _batch(self, t: float) -> Batch:
        for hook in self.sim_hooks:
            hook(self.sim, t)
        kv, self.kv_rows = self.kv_rows, []
        return Batch(t, [self._lane_sample(ln, t) for ln in self.sim.lanes], self._new_events(),
                     self._device(), kv)

    def _restart(self, t: float, sink: SampleWriter) -> None:
        """--loop: a fresh seeded stream; counters and ids continue."""
        sink.put(self._batch(t))  # the old stream's last events and state
        for ln in self.sim.lanes:
            for k, v in lane_counters(ln).items():
                self._base[ln.name][k] += v
            self._step_base[ln.name] += ln.step_no
        self._seq_offset += len(self.sim.workload)
        self.loop_no += 1
        self.sim = self._new_sim()
        self._loop_t0, self._cursor = t, 0

    # ---- the loop ---------------------------------------------------------------------------
    def _on_signal(self, signum: int, _frame: object) -> None:
        why = lifecycle.stop_reason()  # the dashboard's watcher signalled: say why
        self.stop_reason = f"stopped: {why}" if why else f"stopped by {signal.Signals(signum).name}"

    def run(self, writer: RunWriter | None = None) -> str:
        """Record until the duration or the step bound ends, the workload is exhausted or a
        signal arrives.
        The store is written by a separate process; a given `writer` is used from a thread."""
        c = self.settings
        sink = SampleWriter(writer if writer is not None else StoreSpec(
            self.resolved.out, self.meta(), overwrite=c.overwrite,
            blockmap_budget_bytes=int(c.blockmap_budget_mb * 2**20)), self.hooks)
        old = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        status, message = "finished", ""
        try:
            status, message = self._loop(sink)
        except BaseException as exc:
            status, message = "error", f"{type(exc).__name__}: {exc}"
            raise
        finally:
            for s, h in old.items():
                signal.signal(s, h)
            sink.close(status, message)
            if self.nvml is not None:
                self.nvml.close()
        return status

    def _loop(self, sink: SampleWriter) -> tuple[str, str]:
        c = self.settings
        t0 = time.perf_counter()
        period = 1.0 / c.hz
        pace = 1.0 / c.steps_per_s if c.steps_per_s > 0 else 0.0
        next_sample, line_t, steps, line_steps = 0.0, 0.0, 0, 0
        status, message = "finished", "duration reached"
        pause = Pause(control.Watcher.from_env(), pace or self.sim.engine.step_ms / 1000)
        while True:
            if pause.active(t0, c.quiet):  # paused: the engine clock stands still
                if pause.step_due():  # a Step press: one engine step, recorded at once
                    steps += 1
                    self.sim.step(time_s=pause.frozen - self._loop_t0)
                    sink.put(self._batch(pause.frozen))
                    pause.stepped(self.sim.step_no)
                elif pause.sample_due():  # keep the recording alive (readers: "running")
                    sink.put(self._batch(pause.frozen))
                if self.stop_reason is not None:
                    status, message = "stopped", self.stop_reason
                    break
                time.sleep(control.POLL_S / 2)
                continue
            now = time.perf_counter() - t0 - pause.offset
            if now >= next_sample:
                sink.put(self._batch(now))
                next_sample = max(next_sample + period, now + period / 2)
            if self.stop_reason is not None:
                status, message = "stopped", self.stop_reason
                break
            if c.duration is not None and now >= c.duration:
                break
            if self.sim.finished:
                if not c.loop:
                    message = "workload exhausted"
                    break
                self._restart(now, sink)
            if pace and now < steps * pace:  # paced: wait for this step's time or a sample
                time.sleep(max(0.0, min(steps * pace, next_sample, now + control.POLL_S) - now))
                continue
            self.sim.step(time_s=now - self._loop_t0)
            steps += 1
            if c.max_steps is not None and steps >= c.max_steps:
                message = f"{steps} steps reached"
                break
            if now >= line_t + 1.0:
                if not c.quiet:
                    print(self.status_line(now, (steps - line_steps) / (now - line_t)), flush=True)
                line_t, line_steps = now, steps
        end = pause.frozen if pause.paused else time.perf_counter() - t0 - pause.offset
        sink.put(self._batch(end))  # the final state, always recorded
        return status, message

    def status_line(self, t: float, rate: float) -> str:
        parts = [f"[{t:7.1f}s] {rate:7.1f} steps/s"]
        for ln in self.sim.lanes:
            u = ln.alloc.usage()
            cap = max(1, u.capacity_tokens)
            f = {k: v + self._base[ln.name][f"admit_failures_{k.lower()}"]
                 for k, v in ln.failures.items()}
            parts.append(f"{ln.name}: used {u.used_tokens / cap:4.0%} free "
                         f"{u.free_tokens / cap:4.0%} run {ln.run_ids.size} wait "
                         f"{ln.waiting_count} fail C{f['CAPACITY']} F{f['FRAGMENTATION']} "
                         f"P{f['POLICY']}")
        return " | ".join(parts)


def versions(mode: str) -> dict:
    import platform
    import sqlite3

    from kvviz import FORMAT_VERSION, __version__

    out = {"kvviz": __version__, "format_version": FORMAT_VERSION,
           "python": platform.python_version(), "numpy": np.__version__,
           "sqlite": sqlite3.sqlite_version}
    if mode == "real" and "torch" in sys.modules:
        out["torch"] = sys.modules["torch"].__version__
    return out

