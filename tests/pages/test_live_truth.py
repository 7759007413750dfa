"""What the Live page says is true: the form shows the running settings and who started them,
a prefix lane from the form gets prefix sharing and hits, nothing is drawn before the engine's
first step, and Pause / Step reach the collector."""
from __future__ import annotations

import re

import pytest

from kvviz.runs import control, jobs
from kvviz.settings.collector import parse_lanes
from kvviz.store.writer import RunWriter
from kvviz.viz import cellstate as cs
from pages import democollector, live_controls
from tests.pages.pagehelpers import canvases, no_exception, page, rerun_until
from tests.pages.recordings import make_sim, meta_for, sample

WAITING = "Waiting for the collector's first sample"


def _form(at, rec: str):
    k = f"_{rec}"
    return {"lanes": at.multiselect(key=f"live_lanes{k}"), "share": at.slider(
        key=f"live_share{k}"), "rate": at.number_input(key=f"live_rate{k}"),
        "seqs": at.number_input(key=f"live_seqs{k}"), "workload": at.selectbox(
        key=f"live_workload{k}"), "mark": at.slider(key=f"live_mark{k}")}


def _start_button(at):
    return next(b for b in at.button if b.label.startswith("Start / restart"))


def _captions(at) -> str:
    return "\n".join(c.value for c in at.caption).replace("\\", "")  # Markdown escapes


def test_the_form_shows_what_runs_and_who_started_it(runs):
    other = jobs.demo_config(mode="sim", workload="alpaca-like", rate=7.5, max_num_seqs=12,
                             lanes=parse_lanes(["contiguous:best-fit:exact", "paged:32"]))
    rec = democollector.collector().start(other, session="someone-else", how="Start").name
    at = page("app.py")
    no_exception(at)
    f = _form(at, rec)
    assert f["lanes"].value == [s.label for s in other.lanes]
    assert f["workload"].value == "alpaca-like"
    assert f["rate"].value == 7.5 and f["seqs"].value == 12
    text = _captions(at)
    assert "from another tab (Start)" in text
    assert "Start changes what every viewer sees" in text
    assert "lanes contiguous:best-fit:exact, paged:32" in text
    assert f["mark"].value == 0.0 and "watermark" not in text  # vLLM's default
    f["rate"].set_value(3.0)
    f["mark"].set_value(0.25)
    _start_button(at).click().run()
    no_exception(at)
    assert democollector.collector().config.rate == 3.0
    assert democollector.collector().config.watermark == 0.25
    assert "from this tab (Start)" in _captions(at)
    assert "watermark 0.25" in _captions(at)
    new = democollector.collector().status().recording
    assert new != rec and _form(at, new)["rate"].value == 3.0
    assert _form(at, new)["mark"].value == 0.25


def test_a_prefix_lane_from_the_form_shares_blocks_and_hits(runs):
    at = page("app.py")
    rec = democollector.collector().status().recording
    f = _form(at, rec)
    assert f["share"].value == 0.0  # the default demo shares no prefix
    f["lanes"].set_value(["contiguous:first-fit:pow2", "paged:16:prefix"])
    _start_button(at).click().run()
    no_exception(at)
    cfg = democollector.collector().config
    assert cfg.prefix_sharing == live_controls.PREFIX_DEFAULT  # caching needs shared prompts

    def hits(a) -> bool:
        grids = [h.body for h in a.get("html") if "Prefix hit rate" in h.body]
        shown = canvases(a)
        if not grids or len(shown) != 2:
            return False
        rate = re.search(r'aria-label="Prefix hit rate: (\d+)%"', grids[0])
        shared = (shown[1][1]["state"] == cs.SHARED).any()
        return rate is not None and int(rate.group(1)) > 0 and bool(shared)

    rerun_until(at, hits, timeout_s=60)


def _step0_recording(path):
    sim = make_sim(("contiguous:first-fit:pow2", "paged:16"), capacity=8192)
    w = RunWriter(path, meta_for(sim))
    prev: dict[str, int] = {}
    sample(w, sim, 0.0, prev, 1.0)  # the all-free state before the engine's first step
    w.commit()
    return sim, w, prev


def test_nothing_is_drawn_before_the_first_engine_step(runs):
    sim, w, prev = _step0_recording(runs / "first.db")
    try:
        at = page("pages/live.py", run="first.db")
        no_exception(at)
        assert canvases(at) == [] and any(WAITING in i.value for i in at.info)
        for _ in range(30):
            sim.step()
        sample(w, sim, sim.time_s, prev, 0.6)
        w.commit()
        at.run()
        no_exception(at)
        assert len(canvases(at)) == 2 and not any(WAITING in i.value for i in at.info)
    finally:
        w.close("finished")


def test_pause_and_step_reach_the_collector(runs):
    at = page("app.py")
    rerun_until(at, lambda a: any("Collector running" in s.value for s in a.success))
    coll = democollector.collector()
    at.button(key="collector_pause").click().run()
    assert coll.control() == control.Control(True, 0)
    assert any("Paused" in i.value for i in at.info)
    at.button(key="collector_step").click().run()
    at.button(key="collector_step").click().run()
    assert coll.control() == control.Control(True, 2)
    at.button(key="collector_resume").click().run()
    assert coll.control() == control.Control(False, 2)


@pytest.mark.parametrize("how, text", [("opened the page", "with the default demo"),
                                       ("a viewer came back", "again with the same settings")])
def test_the_origin_says_how_a_run_began(how, text):
    o = jobs.Origin(0.0, None, how)
    assert text in live_controls.origin_text(o, "me")
    assert "from another tab" in live_controls.origin_text(o._replace(how="Start",
                                                                      session="x"), "me")


def test_the_glossary_is_in_the_sidebar(runs):
    at = page("app.py", run="rec.db")
    no_exception(at)
    box = [e for e in at.sidebar.expander if e.label.startswith("Glossary")]
    assert box, "no glossary in the sidebar"
    shown = "\n".join(m.value for m in box[0].markdown)
    for name in ("used", "slack", "reserved", "internal", "free", "cached", "largest hole",
                 "external fragmentation index", "tail waste", "shared savings"):
        assert f"**{name}**" in shown, name
