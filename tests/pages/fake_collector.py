"""A stand-in for `python -m collectors` in tests: sim mode, paced in wall time.

Run as the dashboard runs a collector: `python -m tests.pages.fake_collector --config
runs/x.config`; the config is read and validated by the collector's own code
(kvviz.settings.collector). Its lanes, workload, mode and output are used; the pacing is the
fake's own (fast enough for tests).
"""
from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path

from collectors.pause import Pause
from kvviz.runs import control, lifecycle
from kvviz.settings.collector import CollectorConfig
from kvviz.store.writer import RunWriter
from tests.pages.recordings import make_sim, meta_for, sample


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--config", required=True)
    p.add_argument("--rate", type=float, default=40.0)
    p.add_argument("--capacity-tokens", type=int, default=65536)
    p.add_argument("--hz", type=float, default=5.0)
    p.add_argument("--steps-per-s", type=float, default=100.0)
    p.add_argument("--fail-after", type=float, default=None, help="die with a message")
    a = p.parse_args(argv)
    cfg = CollectorConfig.load(Path(a.config))
    sim = make_sim([s.label for s in cfg.lanes], capacity=a.capacity_tokens, requests=5000,
                   rate=a.rate, preset=cfg.workload, prefix_share=cfg.prefix_sharing)
    w = RunWriter(Path(cfg.out), meta_for(sim, cfg.mode))
    stop = {"flag": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(flag=True))
    lifecycle.watch()  # as the real collector: stop when the test process that started us dies
    prev: dict[str, int] = {}
    cursor, t0, last = 0, time.monotonic(), -1.0
    pause = Pause(control.Watcher.from_env(), 1.0 / a.steps_per_s)
    while not stop["flag"]:
        if pause.active(t0, True):  # paused (kvviz/runs/control.py): as the real collector
            if pause.step_due():
                sim.step(pause.frozen)
                sample(w, sim, pause.frozen, prev, 1.0 / a.steps_per_s)
                w.commit()
                pause.stepped(sim.step_no)
            elif pause.sample_due():
                sample(w, sim, pause.frozen, prev, 1.0)
                w.commit()
            time.sleep(0.02)
            continue
        now = time.monotonic() - t0 - pause.offset
        if a.fail_after is not None and now > a.fail_after:
            w.close("error", "fake collector: simulated crash")
            print("RuntimeError: fake collector: simulated crash", file=sys.stderr)
            return 3
        while sim.step_no < now * a.steps_per_s and not sim.finished:
            sim.step(now)
        if now - last >= 1.0 / a.hz:
            sample(w, sim, now, prev, max(1e-3, now - last if last >= 0 else 1.0))
            evs, cursor = sim.events.since(cursor)
            w.add_events(evs)
            w.add_device_memory(now, {"nvml_error": "NVMLError_LibraryNotFound: NVML Shared "
                                      "Library Not Found"})
            w.commit()
            last = now
        time.sleep(0.02)
    w.close("stopped", "stopped by SIGTERM")
    return 0


if __name__ == "__main__":
    sys.exit(main())
