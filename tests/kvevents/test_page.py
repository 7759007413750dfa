"""The Node page's KV events tab (pages/kvevents_view.py) under AppTest: the forest, timeline,
diagnoses and gaps of a recording."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import streamlit as st

ROOT = Path(__file__).resolve().parents[2]
from tests.kvevents.conftest import free_base_port  # noqa: E402
from tests.kvevents.recordings import write_attach_recording, write_kv_recording  # noqa: E402
from tests.pages.pagehelpers import figures, no_exception, page, tile_grids  # noqa: E402

PAGE = "pages/node.py"  # the KV events view is its "KV events" tab


@pytest.fixture
def kv_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("KVVIZ_RUNS_DIR", str(tmp_path))
    st.cache_resource.clear()
    yield tmp_path
    st.cache_resource.clear()


def _texts(at) -> list[str]:
    return [t.value for t in at.text]


def test_the_page_shows_forest_timeline_diagnoses_and_gaps(kv_runs):
    write_kv_recording(kv_runs / "ev.db", free_base_port(2))
    at = page(PAGE)
    no_exception(at)
    kinds = [f["data"][0]["type"] for f in figures(at) if f["data"]]
    assert "icicle" in kinds and "bar" in kinds and "heatmap" in kinds
    text = " ".join(_texts(at))
    assert "shared prefix is never reused" in text and "block holds 16 tokens" in text
    assert "different seeds" in text
    assert "evicted and stored again" in text
    assert "2 batches lost" in text
    assert any(len(df.value) == 1 for df in at.dataframe)  # the gap table


def test_the_view_is_a_tab_of_the_node_page_and_not_a_page_of_its_own(kv_runs):
    at = page(PAGE)
    no_exception(at)
    assert "KV events" in [t.label for t in at.tabs]
    assert "kvevents" not in (ROOT / "app.py").read_text()


def test_no_recording_says_how_to_make_one(kv_runs):
    at = page(PAGE)
    no_exception(at)
    assert any("kvviz events" in i.value for i in at.info)


def test_a_bad_endpoint_is_one_error_and_the_page_stays(kv_runs):
    at = page(PAGE)
    at.text_input(key="kve_eps").input("http://not-zmq:1")
    at.button(key="kve_start").click().run()
    no_exception(at)
    shown = [re.sub(r"\\(.)", r"\1", e.value) for e in at.error]  # escaped Markdown
    assert any("expected tcp://" in e for e in shown)


def test_remote_text_is_never_markdown(kv_runs):
    write_kv_recording(kv_runs / "ev.db", free_base_port(2))
    at = page(PAGE)
    for md in at.markdown:
        assert "tcp://" not in md.value
    assert json.dumps(_texts(at))  # diagnoses are st.text


def test_a_live_recording_is_followed(kv_runs):
    w = write_kv_recording(kv_runs / "live.db", free_base_port(2), close=False)
    w.commit()
    try:
        at = page(PAGE)
        no_exception(at)
        assert any(f["data"] and f["data"][0]["type"] == "icicle" for f in figures(at))
        assert "2 batches lost" in " ".join(_texts(at))
    finally:
        w.close()


def test_recording_started_from_the_page_shows_the_stream(kv_runs):
    import threading
    import time

    from tests.kvevents.schema_pub import SchemaPublisher, payload, store
    from tests.pages.pagehelpers import rerun_until

    port = free_base_port(1)
    pub = SchemaPublisher(f"tcp://127.0.0.1:{port}")
    stop = threading.Event()

    def feed() -> None:
        i = 0
        while not stop.is_set():
            pub.send(payload([store([i], i - 1 if i else None)]))
            i += 1
            time.sleep(0.1)
    th = threading.Thread(target=feed, daemon=True)
    th.start()
    try:
        at = page(PAGE)
        at.text_input(key="kve_eps").input(f"tcp://127.0.0.1:{port}")
        at.button(key="kve_start").click().run()
        no_exception(at)
        rerun_until(at, lambda a: any(f["data"] and f["data"][0]["type"] == "icicle"
                                      for f in figures(a)), timeout_s=60)
        at.button(key="kve_stop").click().run()
        no_exception(at)
    finally:
        stop.set()
        th.join()
        pub.close()  # a recorder left running by a failure ends at exit (atexit)


def _node_run(path, waiting: int) -> None:
    from kvviz.store.writer import RunWriter

    w = RunWriter(path, {"mode": "node", "url": "http://n:8000/metrics", "lanes": []})
    for i in range(4):
        w.add_node_sample(float(i), {"time": 1e9 + i, "url": "http://n:8000/metrics",
                                     "status": "ok", "message": "", "engine": "vllm",
                                     "kv_usage": 0.01, "num_running": 4, "num_waiting": waiting,
                                     "block_size": 16, "num_gpu_blocks": 1000}, {})
    w.close()


def test_waiting_requests_are_explained_from_the_stream_and_the_node_scrape(kv_runs):
    write_kv_recording(kv_runs / "ev.db", free_base_port(2))
    _node_run(kv_runs / "node.db", waiting=6)
    at = page(PAGE)
    no_exception(at)
    # another recording's scrape is never combined by default: it may be another node
    assert at.selectbox(key="kve_gauges").value == "none"
    assert "requests wait" not in " ".join(_texts(at))
    at.selectbox(key="kve_gauges").set_value("node.db").run()
    no_exception(at)
    assert any("cannot check" in w.value for w in at.warning)  # said on the page
    text = " ".join(_texts(at))
    assert "6 requests wait while KV usage is only 1%" in text
    assert "4 requests have run in every recent scrape" in text
    assert "of them are held by no running request" in text  # 10 blocks in use, more cached
    at.selectbox(key="kve_gauges").set_value("none").run()
    assert "requests wait" not in " ".join(_texts(at))
    assert "cannot tell blocks in use from evictable ones" in " ".join(_texts(at))


def test_an_attach_recording_uses_its_own_scrapes_without_asking(kv_runs):
    _node_run(kv_runs / "node.db", waiting=6)  # another node: must not be used
    write_attach_recording(kv_runs / "attach.db", free_base_port(2), waiting=3)
    at = page(PAGE)
    at.selectbox(key="kve_pick").set_value("attach.db").run()
    no_exception(at)
    assert not [s for s in at.selectbox if s.key == "kve_gauges"]
    text = " ".join(_texts(at))
    assert "this recording's own scrapes" in " ".join(c.value for c in at.caption)
    assert "3 requests wait" in text and "6 requests wait" not in text


def test_a_recording_whose_writer_was_killed_is_not_followed_and_says_so(kv_runs):
    from kvviz.store import kv_reader
    from kvviz.store.liveness import STALE_S, STOPPED_UNEXPECTEDLY
    from pages import kvevents_view
    from tests.store.test_stale_run import age_heartbeat

    w = write_kv_recording(kv_runs / "dead.db", free_base_port(2), close=False)
    w.commit()  # committed, never closed: what a SIGKILLed `kvviz events` leaves
    try:
        assert kvevents_view.is_live("dead.db")
        age_heartbeat(kv_runs / "dead.db", STALE_S + 5)
        with kv_reader.connect(kv_runs / "dead.db") as conn:
            assert kv_reader.run_state(conn).status == STOPPED_UNEXPECTEDLY
        assert not kvevents_view.is_live("dead.db")
        at = page(PAGE)
        no_exception(at)
        assert any("stopped unexpectedly" in x.value for x in at.warning)
        assert "2 batches lost" in " ".join(_texts(at))  # what it committed is shown
    finally:
        w.close()


def test_a_recording_that_ended_in_an_error_shows_its_message_as_text(kv_runs):
    w = write_kv_recording(kv_runs / "err.db", free_base_port(2), close=False)
    w.close("error", "memory guard: RSS 951 MB past 950 MB **not markdown**")
    at = page(PAGE)
    no_exception(at)
    shown = [re.sub(r"\\(.)", r"\1", e.value) for e in at.error]
    assert any("ended with an error" in e and "RSS 951 MB" in e for e in shown)
    assert any(r"\*\*not markdown\*\*" in e.value for e in at.error)  # escaped, not bold


def test_stored_less_evicted_is_cached_plus_the_blocks_a_lost_batch_left_unconfirmed(kv_runs):
    """Pod a lost two batches: its counts say where every stored block went."""
    write_kv_recording(kv_runs / "ev.db", free_base_port(2))
    at = page(PAGE)
    no_exception(at)
    t = tile_grids(at, has="cached blocks")[0]
    stored, evicted, again, cached = (int(t[k].replace(",", "")) for k in (
        "stored (announced)", "evicted", "re-announced (already cached)", "cached blocks"))
    said = [c.value for c in at.caption if "before a lost batch" in c.value]
    assert said, "the difference is not explained"
    doubt = int(said[0].split()[0].replace(",", ""))
    assert stored - again - evicted == cached + doubt > cached
