"""Hostile recordings on the pages (issue 26 item 7): the KV events tab on recordings of
hostile streams shows a view or st.error (never an exception box), reads a bounded number of
events and says so; Replay shows lane names as text; the KV events figures show endpoint
names as text; a torch snapshot of 2^63-byte segments is st.error on the Node page."""
from __future__ import annotations

import json
import re
import shutil

import pytest

from kvviz.node.trust import plain_markdown
from tests.kvevents.hostile_recordings import HOSTILE, _record
from tests.kvevents.recordings import write_kv_recording
from tests.kvevents.schema_pub import payload, store
from tests.pages.hostile_text import endpoint, lane_name, rename_endpoints, rename_lane
from tests.pages.pagehelpers import figures, no_exception, page, tiles
from tests.torchsnap.snaps import dumps, make_snapshot


def unescaped(at) -> list[str]:
    return [re.sub(r"\\(.)", r"\1", e.value) for e in at.error]


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_the_kv_events_tab_on_a_hostile_stream_is_a_view_or_an_error(runs, name):
    HOSTILE[name](runs / "ev.db")
    at = page("pages/node.py")
    no_exception(at)
    errors = unescaped(at)
    if name == "nested summary_json":
        assert any("kv_streams row 1: summary_json is not JSON" in e for e in errors), errors
    elif name == "empty run table":
        assert any("run header row is missing" in e for e in errors), errors
    else:
        assert not errors, errors
        assert tiles(at) or any("No KV events" in i.value for i in at.info), "no view drawn"


def test_a_gap_heavy_stream_says_what_it_lost(runs):
    HOSTILE["gap heavy"](runs / "ev.db")
    at = page("pages/node.py")
    no_exception(at)
    text = " ".join(t.value for t in at.text)
    lost = re.search(r"(\d+) sequence gaps, (\d+) batches lost", text)
    assert lost and int(lost.group(1)) >= 250 and int(lost.group(2)) > 2**63, text[:500]
    assert "integer overflow" not in " ".join(unescaped(at))


def large_recording_on_the_tab(runs, monkeypatch):
    """The tab on 60 batches of 100 stored blocks, with a cap of 3,000 read 4 batches at a time."""
    from pages import kvevents_model

    monkeypatch.setattr(kvevents_model, "EVENT_CAP", 3_000)
    monkeypatch.setattr(kvevents_model, "STEP", 4)  # 4 batches of 100 blocks at a time
    blocks = [(k, payload([store([10_000 * k + j for j in range(100)], None, 16,
                                 tokens=list(range(1600)))])) for k in range(60)]
    _record(runs / "big.db", blocks)
    at = page("pages/node.py")
    no_exception(at)
    return at, " ".join(w.value for w in at.warning)


def test_a_large_recording_is_read_up_to_the_cap_and_says_so(runs, monkeypatch):
    at, warn = large_recording_on_the_tab(runs, monkeypatch)
    got = re.search(r"holds ([\d,]+) block stores and removals; the cache below is rebuilt "
                    r"from the first ([\d,]+)", warn)
    assert got, warn
    total, read = (int(g.replace(",", "")) for g in got.groups())
    assert total == 6_000 and 3_000 <= read <= 3_400
    cached = tiles(at)["cached blocks"]
    assert int(cached.replace(",", "")) == read  # 1 block per stored event, none evicted


def test_past_the_window_the_tab_says_which_figures_are_a_slice(runs, monkeypatch):
    from kvviz.store import kv_reader

    monkeypatch.setattr(kv_reader, "WINDOW", 8)  # the newest 8 of 60 batches
    at, warn = large_recording_on_the_tab(runs, monkeypatch)
    assert re.search(r"holds (at least|more than) [\d,]+ block stores and removals", warn), warn
    captions = " ".join(c.value for c in at.caption)
    assert "The timeline and the counts of streams without a final summary: the newest 8 " \
           "batches only" in captions, captions


def test_replay_shows_a_lane_name_as_text_not_markdown(runs):
    hostile = lane_name(1)
    shutil.copy(runs / "rec.db", runs / "evil.db")
    rename_lane(runs / "evil.db", "paged:16", hostile)
    at = page("pages/replay.py", run="evil.db")
    no_exception(at)
    sources = [m.value for m in at.markdown]
    # as text, with a break after each colon (U+200B) and none after a hyphen (U+2060)
    assert f"#### {plain_markdown(hostile)}" in [
        s.replace("\u200b", "").replace("-\u2060", "-") for s in sources]
    assert not [s for s in sources if "](http://127.0.0.1:1" in s], sources
    titles = [json.dumps(f) for f in figures(at)]
    assert not [t for t in titles if '<a href=\\"http' in t]
    assert any("&lt;a href=" in t for t in titles), "the lane name is not in a figure"


def test_the_kv_events_figures_show_endpoint_names_as_text(runs):
    from tests.kvevents.conftest import free_base_port

    write_kv_recording(runs / "ev.db", free_base_port(2))
    rename_endpoints(runs / "ev.db", 1)
    at = page("pages/node.py")
    no_exception(at)
    shown = json.dumps(figures(at))
    assert endpoint(1, 1) not in shown and "&lt;a href=" in shown


@pytest.mark.parametrize("total", [2**63, 2**64 - 512])
def test_a_snapshot_segment_of_2_63_bytes_is_an_error_not_an_exception(runs, total, uploads):
    snap = make_snapshot()
    snap["segments"][0]["total_size"] = total
    at = page("pages/node.py")
    uploads.put("torch.cuda.memory._snapshot()", "big.pickle", dumps(snap))
    at.run()
    no_exception(at)
    assert any("64-bit arithmetic" in e or "2**64" in e for e in unescaped(at)), unescaped(at)

