"""The Node tab's attach form (a `kvviz attach` job) and an attach recording's scrapes and KV
events side by side."""
from __future__ import annotations

import re
import threading
import time

import pytest
import streamlit as st

from kvviz.runs import process
from kvviz.store import kv_reader
from tests.kvevents.conftest import free_base_port
from tests.kvevents.recordings import write_attach_recording
from tests.kvevents.schema_pub import SchemaPublisher, payload
from tests.kvevents.schema_pub import store as stored
from tests.node.fakes import FakeNode
from tests.pages.pagehelpers import no_exception, page, rerun_until, tiles

PAGE = "pages/node.py"


@pytest.fixture
def runs(tmp_path, monkeypatch):
    monkeypatch.setenv("KVVIZ_RUNS_DIR", str(tmp_path))
    st.cache_resource.clear()
    yield tmp_path
    process.stop_all()
    st.cache_resource.clear()


def _texts(at) -> str:
    return " ".join(t.value for t in at.text)


def test_an_attach_recording_shows_its_scrapes_and_its_events_side_by_side(runs):
    write_attach_recording(runs / "node-attach.db", free_base_port(2), waiting=3)
    at = page(PAGE)
    no_exception(at)
    assert at.selectbox(key="node_pick").value == "node-attach.db"
    assert "(this recording: the same node)" in " ".join(m.value for m in at.markdown)
    labels = tiles(at)
    assert labels["Running"] == "2" and int(labels["Cached blocks"].replace(",", "")) > 0
    assert "3 requests wait" in _texts(at)


def test_a_bad_events_endpoint_is_one_error_on_the_page(runs):
    at = page(PAGE)
    at.text_input(key="att_url").input("localhost:8000")
    at.text_input(key="att_ev").input("http://not-zmq:1")
    at.button(key="att_start").click().run()
    no_exception(at)
    (err,) = [e.value for e in at.error]
    assert err.startswith("Cannot attach") and "expected tcp" in err.replace("\\", "")


def test_the_form_starts_an_attach_job_that_records_both(runs):
    node = FakeNode()
    node.thread.start()
    port = free_base_port(2)
    ep, rp = f"tcp://127.0.0.1:{port}", f"tcp://127.0.0.1:{port + 1}"
    pub = SchemaPublisher(ep, replay=rp, layout="0.32")
    stop = threading.Event()

    def go():
        i = 0
        while not stop.is_set():
            pub.send(payload([stored([1000 + i], None)]))
            i += 1
            time.sleep(0.1)

    th = threading.Thread(target=go, daemon=True)
    th.start()
    try:
        at = page(PAGE)
        at.text_input(key="att_url").input(node.url("/metrics"))
        at.text_input(key="att_ev").input(ep)
        at.text_input(key="att_rp").input(rp)
        at.number_input(key="att_every").set_value(0.5)
        assert not any("not started" in i.value for i in at.info)  # no idle boxes above
        at.button(key="att_start").click().run()
        no_exception(at)
        # the status says running: nothing beside it may say there is no recording
        shown = " ".join(i.value for i in at.info)
        assert "No node recording yet" not in shown, shown
        assert not at.error, [e.value for e in at.error]  # nothing reads it before it exists
        assert at.selectbox(key="node_pick").value.startswith("node-")

        def both(a) -> bool:
            runs_ = sorted(runs.glob("node-*.db"))
            if not runs_:
                return False
            try:
                with kv_reader.connect(runs_[0]) as conn:
                    n = conn.execute("SELECT COUNT(*) FROM kv_batches").fetchone()[0]
                    m = conn.execute("SELECT COUNT(*) FROM node_samples").fetchone()[0]
            except Exception:  # noqa: BLE001 (not created yet)
                return False
            return n > 0 and m > 1 and any(
                "(this recording: the same node)" in x.value for x in a.markdown)

        rerun_until(at, both, timeout_s=60)
        at.button(key="att_stop").click().run()
        no_exception(at)
    finally:
        stop.set()
        th.join()
        pub.close()
        node.server.shutdown()
        node.server.server_close()


@pytest.mark.parametrize("waiting", [0, 3])
def test_the_waiting_question_is_asked_only_when_requests_wait(runs, waiting):
    write_attach_recording(runs / "node-attach.db", free_base_port(2), waiting=waiting)
    at = page(PAGE)
    no_exception(at)
    heads = [h.value for h in at.subheader]
    asked = "Usage looks low: why are requests waiting?" in heads
    assert asked == (waiting > 0), heads
    assert (("Cached blocks and KV usage" in heads) == (waiting == 0)), heads


def test_the_scrape_column_and_the_events_beside_it_read_one_instant(runs):
    """The KV usage headline and the events column's usage sentence come from the same scrape
    (one read per redraw): 2% of 1,000 blocks is 20 in use on both."""
    write_attach_recording(runs / "node-attach.db", free_base_port(2), waiting=3)
    at = page(PAGE)
    no_exception(at)
    labels = tiles(at)
    assert labels["KV usage"] == "2.0%"
    said = re.findall(r"KV usage (?:is only|is|at) (\d+)%", _texts(at))
    assert said and set(said) == {"2"}, said
