"""Live draws each lane at one instant: the tiles under a lane's map are those of the sample
taken with that map, and its latest refusals are at or before it, even when samples newer
than the map exist (maps thinned by the block-map budget, or a sample written between the
page's reads)."""
from __future__ import annotations

import re

import streamlit as st

from kvviz.runs import directory
from kvviz.store.writer import RunWriter
from kvviz.viz import timeseries as vt
from tests.pages.pagehelpers import no_exception, page, tile_grids
from tests.pages.recordings import make_sim, meta_for, sample


def test_a_lanes_tiles_and_refusals_are_of_its_maps_instant(tmp_path, monkeypatch):
    monkeypatch.setenv("KVVIZ_RUNS_DIR", str(tmp_path))
    st.cache_resource.clear()
    sim = make_sim(capacity=8192)
    w = RunWriter(tmp_path / "rec.db", meta_for(sim))
    prev: dict[str, int] = {}
    cursor = 0
    for _ in range(340):  # samples every 5 steps, maps every 50: the last map at step 300
        sim.step()
        if sim.step_no % 5 == 0:
            sample(w, sim, sim.time_s, prev, 0.1, with_maps=sim.step_no % 50 == 0)
            evs, cursor = sim.events.since(cursor)
            w.add_events(evs)
            w.commit()
    w.close("finished")
    r = directory.open_run(tmp_path, "rec.db")
    try:
        lanes = r.lanes()
        t_map = {ln: r.latest_blockmap(ln)[1] for ln in lanes}
        want = [{h.label: h.value for h in vt.headline(r.sample_at(ln, t_map[ln]).iloc[-1])}
                for ln in lanes]
        newest = [{h.label: h.value for h in vt.headline(r.sample_at(ln, 1e9).iloc[-1])}
                  for ln in lanes]
        fails = r.events(kinds=["admit_failed"])
    finally:
        r.close()
    assert want != newest  # the newest samples read otherwise: the test can tell
    assert (fails["t"] > max(t_map.values())).any()  # refusals after the maps exist
    at = page("pages/live.py", run="rec.db")
    no_exception(at)
    assert tile_grids(at) == want
    shown = [float(x) for c in at.caption if c.value.startswith("Latest refused")
             for x in re.findall(r"at t = ([\d.]+) s", c.value)]
    assert shown and max(shown) <= max(t_map.values()) + 1e-9
