"""Run one request stream through the rule at many node settings, on the machine's cores.

Each configuration is one `kvviz.engine.Simulation` with one paged lane (the node's block
pool: `NodeSettings.lane()`, `capacity_tokens`), run in one compiled call that logs the
blocks the pool holds after every step (an idle span once): peak and mean blocks in use and
the usage curve come from the pool itself, not from a second model of it. The self-check's
run (a StepRecord) is one compiled call too, logging beside it every step's lists and the
sampled steps' block tables (kvviz/twin/logged.py).
The queueing delays and the preemption curve come from the simulation's event log.
"""
from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from pathlib import Path

import numpy as np

from kvviz.core.config import ModelShape
from kvviz.core.errors import KvvizError
from kvviz.core.workload import Workload
from kvviz.engine import Simulation
from kvviz.engine.eventlog import KIND_CODE
from kvviz.twin.logged import run_logged
from kvviz.twin.selfcheck import RecordSpec, StepRecord
from kvviz.twin.settings import NodeSettings

ROOT = Path(__file__).resolve().parents[2]  # the directory that holds the kvviz package
CURVE_POINTS = 2000  # points kept of each curve (the max of each bucket: peaks survive)


@dataclass(frozen=True)
class Stream:
    """What every configuration shares: the requests and the clock."""

    workload: Workload
    model: ModelShape
    step_ms: float
    max_seq_len: int


@dataclass(frozen=True)
class ConfigRun:
    """One configuration's run: the lane's summary (`kvviz simulate --json`'s fields) and
    what the twin derives beside it."""

    settings: NodeSettings
    summary: dict
    queue_steps: np.ndarray  # per admitted request: its first admission step - arrival step
    blocks_peak: int
    blocks_mean: float
    curve_step: np.ndarray  # int64: the step each curve point ends
    curve_blocks: np.ndarray  # int64: blocks in use (the bucket's max)
    curve_preempted: np.ndarray  # int64: preemptions so far
    record: StepRecord | None = None  # per step (the self-check's side), when asked


def arrival_steps(arrival_s: np.ndarray, step_ms: float) -> np.ndarray:
    """The step at which each request arrives: the first step s >= 1 whose clock
    s x step_ms / 1000 reaches its arrival time (as Simulation.step compares them)."""
    s = np.maximum(1, np.ceil(arrival_s * 1000.0 / step_ms)).astype(np.int64)
    for _ in range(2):  # float rounding of the division: settle on the clock's comparison
        s = np.where(s * step_ms / 1000.0 < arrival_s, s + 1, s)
        s = np.where((s > 1) & ((s - 1) * step_ms / 1000.0 >= arrival_s), s - 1, s)
    return s


def _queue_steps(sim: Simulation, stream: Stream) -> tuple[np.ndarray, np.ndarray]:
    """(first admission - arrival step per admitted request, steps of the preemptions)."""
    ev, _ = sim.events.since(sim.events.oldest)
    kind, seq, step = ev["kind"], ev["seq_id"], ev["step"]
    adm = kind == KIND_CODE["admitted"]
    first = np.full(len(stream.workload), np.iinfo(np.int64).max, np.int64)
    np.minimum.at(first, seq[adm], step[adm])
    got = first < np.iinfo(np.int64).max
    arrive = arrival_steps(stream.workload.arrival_s, stream.step_ms)
    return first[got] - arrive[got], np.sort(step[kind == KIND_CODE["preempted"]])


def _curve(steps: np.ndarray, blocks: np.ndarray, preempt_steps: np.ndarray):
    n = steps.size
    cuts = np.unique(np.linspace(0, n, min(n, CURVE_POINTS) + 1).astype(np.int64))
    ends = cuts[1:] - 1
    peak = (np.maximum.reduceat(blocks, cuts[:-1]) if n else np.zeros(0, np.int64))
    at = steps[ends] if n else np.zeros(0, np.int64)
    done = np.searchsorted(preempt_steps, at, side="right").astype(np.int64)
    return at, peak.astype(np.int64), done


def run_config(stream: Stream, settings: NodeSettings,
               record: RecordSpec | bool | None = None) -> ConfigRun:
    """One configuration through the rule (what a worker does); `record`: keep the
    StepRecord the self-check compares (True: every list and table, the replay's ids)."""
    sim = Simulation(stream.workload, [settings.lane()], settings.cache(stream.model),
                     settings.engine(stream.step_ms, stream.max_seq_len))
    lane = sim.lanes[0]
    rec = None
    if record:
        rec = run_logged(sim, RecordSpec() if record is True else record)
    else:
        lane.log_held()
        sim.run()
    steps, blocks = lane.held_log()
    weight = np.diff(steps, prepend=0)
    summary = sim.summaries()[0]
    queue, preempt_steps = _queue_steps(sim, stream)
    at, peak, done = _curve(steps, blocks, preempt_steps)
    mean = float((blocks * weight).sum() / weight.sum()) if weight.size else 0.0
    return ConfigRun(settings, summary, queue, int(blocks.max()) if blocks.size else 0, mean,
                     at, peak, done, rec)


def default_workers() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def run_all(stream: Stream, configs: list[NodeSettings], workers: int | None = None,
            progress: Callable[[int, int], None] | None = None,
            record_first: RecordSpec | bool | None = None) -> list[ConfigRun]:
    """Every configuration's run, in the order given; `workers` processes (default: the
    cores this process may use; 1 runs here, without a pool); `record_first`: the first
    (the baseline) keeps its StepRecord, as run_config's `record`."""
    n = len(configs)
    workers = min(n, workers or default_workers())
    if workers <= 1:
        out = []
        for i, c in enumerate(configs):
            out.append(run_config(stream, c, record_first if i == 0 else None))
            if progress is not None:
                progress(i + 1, n)
        return out
    return _in_children(stream, configs, workers, progress, record_first)


def _in_children(stream: Stream, configs: list[NodeSettings], workers: int,
                 progress: Callable[[int, int], None] | None,
                 record_first: RecordSpec | bool | None) -> list[ConfigRun]:
    """`workers` processes of `python -m kvviz.twin.worker`, each running configurations one
    after another (the next one as it answers): fresh interpreters, so neither a threaded
    parent (the dashboard) is forked nor its main script (a Streamlit page) re-run, as
    multiprocessing's start methods would; each loads numba and the compiled rule once."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)}
    pending = list(enumerate(configs))
    runs: list[ConfigRun | None] = [None] * len(configs)
    procs, idle, busy = [], [], {}
    try:
        for _ in range(workers):
            proc = subprocess.Popen([sys.executable, "-m", "kvviz.twin.worker"],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
            procs.append((proc, Connection(os.dup(proc.stdin.fileno()), readable=False),
                          Connection(os.dup(proc.stdout.fileno()), writable=False)))
            proc.stdin.close()
            proc.stdout.close()
        for worker in procs:  # once all are starting: a send waits for the worker to read
            _send(worker, stream)
            idle.append(worker)
        done = 0
        while pending or busy:
            while pending and idle:
                worker = idle.pop()
                i, c = pending.pop(0)
                _send(worker, (i, c, record_first if i == 0 else None))
                busy[worker[2]] = worker
            for back in wait(list(busy)):
                worker = busy.pop(back)
                try:
                    msg = back.recv()
                except EOFError:
                    raise _stopped(worker[0]) from None
                runs[msg[0]] = _answer(msg[1:])
                idle.append(worker)
                done += 1
                if progress is not None:
                    progress(done, len(configs))
    finally:
        failed = any(r is None for r in runs)
        for proc, to, back in procs:
            if failed:
                proc.kill()
            to.close()  # the worker's stdin ends: it exits
            back.close()
            proc.wait()
    return [r for r in runs if r is not None]


def _send(worker: tuple, obj) -> None:
    try:
        worker[1].send(obj)
    except OSError:  # its stdin closed: it died
        raise _stopped(worker[0]) from None


def _stopped(proc: subprocess.Popen) -> RuntimeError:
    return RuntimeError(f"a what-if worker stopped (exit {proc.wait()}) without an answer")


def _answer(msg: tuple) -> ConfigRun:
    """A worker's ("ok", ConfigRun) or ("error", kind, message) (our own child)."""
    if msg[0] == "ok":
        return msg[1]
    if msg[1] == "input":
        raise KvvizError(msg[2])
    raise RuntimeError(f"a what-if worker failed: {msg[2]}")
