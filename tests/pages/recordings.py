"""Small real recordings for page tests: a sim-mode Simulation written through RunWriter."""
from __future__ import annotations

from pathlib import Path

from kvviz.core.config import CacheConfig, LaneSpec, WorkloadConfig
from kvviz.core.metrics import compute
from kvviz.core.workload import generate
from kvviz.engine import Simulation
from kvviz.store.writer import RunWriter

LANES = ("contiguous:first-fit:max", "paged:16")


def make_sim(lanes=LANES, capacity: int = 16384, requests: int = 400, rate: float = 40.0,
             preset: str = "sharegpt-like", seed: int = 0,
             prefix_share: float = 0.0) -> Simulation:
    w = generate(WorkloadConfig(preset, num_requests=requests, rate=rate, seed=seed,
                                prefix_share=prefix_share))
    return Simulation(w, [LaneSpec.parse(x) for x in lanes], CacheConfig(capacity_tokens=capacity))


def meta_for(sim: Simulation, mode: str = "sim") -> dict:
    cap = sim.cache.capacity_tokens
    return {"mode": mode, "device": "cpu", "model": {"name": sim.cache.model.name},
            "cache": {"capacity_tokens": cap}, "workload": {}, "engine": {},
            "lanes": [{"name": ln.name, "label": ln.spec.label, "allocator": ln.spec.allocator,
                       "block_size": ln.spec.block_size, "capacity_tokens": cap,
                       "bytes_per_token": sim.cache.model.kv_bytes_per_token}
                      for ln in sim.lanes], "versions": {}}


def sample(writer: RunWriter, sim: Simulation, t: float, prev_tokens: dict[str, int],
           dt: float, with_maps: bool = True) -> None:
    for ln in sim.lanes:
        bm = ln.snapshot()
        m = compute(bm).as_dict()
        toks = ln.tokens_generated
        m.update(preemptions=ln.preemptions, tokens_generated=toks,
                 tokens_per_s=(toks - prev_tokens.get(ln.name, 0)) / dt if dt else 0.0,
                 running=int(ln.run_ids.size), waiting=ln.waiting_count,
                 **{f"admit_failures_{k.lower()}": v for k, v in ln.failures.items()},
                 prefix_query_tokens=ln.prefix_query_tokens,
                 prefix_hit_tokens=int(getattr(ln.alloc, "prefix_hit_tokens", 0)),
                 **ln.shares.counters())
        prev_tokens[ln.name] = toks
        writer.add_sample(t, sim.step_no, ln.name, m, bm if with_maps else None)


def write_recording(path: Path, *, steps: int = 300, every: int = 20, **kw) -> Path:
    """A finished recording: a sample (and block map) per lane every `every` steps."""
    sim = make_sim(**kw)
    w = RunWriter(path, meta_for(sim))
    prev: dict[str, int] = {}
    cursor = 0
    for _ in range(steps):
        sim.step()
        if sim.step_no % every == 0:
            sample(w, sim, sim.time_s, prev, every * sim.engine.step_ms / 1000)
            evs, cursor = sim.events.since(cursor)
            w.add_events(evs)
            w.add_device_memory(sim.time_s, {"nvml_error": "NVMLError_LibraryNotFound: NVML "
                                             "Shared Library Not Found"})
            w.commit()
    w.close("finished")
    return path


def failure_times(path: Path) -> list[float]:
    from kvviz.store.reader import RunReader

    r = RunReader(path)
    try:
        ev = r.events(kinds=["admit_failed"])
        return [float(x) for x in ev["t"]] if not ev.empty else []
    finally:
        r.close()

