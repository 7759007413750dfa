"""The Live page's default demo (kvviz.runs.jobs.DEMO) shows what the product is about within
its first minute: a FRAGMENTATION refusal on a contiguous lane (free >= need > largest hole)
and CAPACITY refusals, on the collector's own engine, paced as the live collector paces it
(steps_per_s engine steps per second of arrivals). Asserted by the property, not by counts:
the stream is sharegpt-like lengths, and the scheduler's details may change."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from collectors.launch import build
from kvviz.engine.eventlog import KIND_CODE, REASON_CODE
from kvviz.runs import jobs

MINUTE_S = 60.0


def first_minute(seed: int, tmp_path) -> tuple[dict, list[str]]:
    cfg = dataclasses.replace(jobs.run_config(jobs.DEMO, tmp_path / "demo.db"), mode="sim",
                              seed=seed, kv_events_record=False)
    sim = build(cfg).sim
    dt = 1.0 / cfg.steps_per_s
    while sim.step_no * dt < MINUTE_S:
        sim.step(time_s=sim.step_no * dt)
    evs, _ = sim.events.since(0)
    return evs.cols, list(evs.lanes)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_default_demo_fragments_within_a_minute(seed, tmp_path):
    c, lanes = first_minute(seed, tmp_path)
    failed = c["kind"] == KIND_CODE["admit_failed"]
    contiguous = np.isin(c["lane"], [i for i, n in enumerate(lanes) if n.startswith("contig")])
    frag = failed & contiguous & (c["reason"] == REASON_CODE["FRAGMENTATION"])
    assert frag.any(), "no FRAGMENTATION refusal on a contiguous lane in the first minute"
    need, free = c["need_tokens"][frag], c["free_tokens"][frag]
    hole = c["largest_hole_tokens"][frag]
    assert ((free >= need) & (need > hole)).all()  # enough free in total, no hole that large
    assert (c["time_s"][frag] < MINUTE_S).all()
    cap = failed & (c["reason"] == REASON_CODE["CAPACITY"])
    assert cap.any(), "no CAPACITY refusal in the first minute"
    assert (c["free_tokens"][cap] < c["need_tokens"][cap]).all()


def test_the_demo_lanes_put_a_fragmenting_lane_beside_max_and_paged():
    lanes = [s.label for s in jobs.DEMO.lanes]
    assert lanes[0].startswith("contiguous:") and not lanes[0].endswith(":max")
    assert "contiguous:first-fit:max" in lanes and "paged:16" in lanes
