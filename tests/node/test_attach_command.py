"""`kvviz attach`: a node's scrapes and KV-event stream in ONE recording; bad input (a URL that
is not a node, an events endpoint of something else, a node that stops) is one clear line and
the recording keeps what arrived; bad flags exit 2. (Against a real vLLM: tests/real_vllm.)"""
from __future__ import annotations

import sqlite3
import threading
import time

from kvviz.commands.cli import main
from kvviz.node.kvevents.rebuild import load_model
from kvviz.store import kv_reader
from kvviz.store.reader import RunReader
from tests.kvevents.conftest import free_base_port
from tests.kvevents.schema_pub import SchemaPublisher, payload, publish_for
from tests.kvevents.schema_pub import store as stored


def _lines(err: str) -> list[str]:
    return [ln for ln in err.splitlines() if ln.startswith("kvviz attach:")]


def test_scrapes_and_events_go_into_one_recording(fake_node, tmp_path, capsys):
    port = free_base_port(2)
    ep, rp = f"tcp://127.0.0.1:{port}", f"tcp://127.0.0.1:{port + 1}"
    pub = SchemaPublisher(ep, replay=rp, layout="0.32")
    try:
        pub.send(payload([stored([1, 2], None)]))  # before kvviz joins: from the replay buffer
        th = publish_for(pub, 2.0, lambda i: payload([stored([100 + i], None)]))
        out = tmp_path / "node.db"
        rc = main(["attach", fake_node.url("/metrics"), "--kv-events", ep, "--replay", rp,
                   "--interval", "0.5", "--duration", "3", "--out", str(out)])
        th.join()
    finally:
        pub.close()
    err = capsys.readouterr().err
    assert rc == 0, err
    r = RunReader(out)
    try:
        samples = r.node_samples()
        meta = r.meta
    finally:
        r.close()
    assert len(samples) >= 4 and set(samples["status"]) == {"ok"}
    assert meta["mode"] == "node" and meta["attach"] is True
    assert meta["kv_events"]["endpoints"] == [ep]
    with kv_reader.connect(out) as conn:
        model, _ = load_model(conn)
        (s,) = kv_reader.streams(conn)
    cached = {h for f in model.forests.values() for h in f.parent}
    assert {1, 2} <= cached and len(cached) == s["summary"]["cached_blocks"]
    assert s["summary"]["replayed_batches"] >= 1
    assert "[" in err and "events:" in err  # the live status line


def test_an_events_endpoint_of_something_else_is_one_line_and_the_scrapes_are_kept(
        fake_node, tmp_path, capsys):
    port = free_base_port(1)
    ep = f"tcp://127.0.0.1:{port}"
    pub = SchemaPublisher(ep)
    try:
        th = publish_for(pub, 5.0, lambda i: b"GET / HTTP/1.1")  # not msgpack
        out = tmp_path / "node.db"
        rc = main(["attach", fake_node.url("/metrics"), "--kv-events", ep, "--interval", "0.5",
                   "--duration", "20", "--out", str(out), "--quiet"])
        th.join()
    finally:
        pub.close()
    err = capsys.readouterr().err
    assert rc == 1
    (line,) = [ln for ln in _lines(err) if "error" in ln]
    assert "not a KV-event publisher" in line
    r = RunReader(out)
    try:
        assert len(r.node_samples()) >= 1
        assert r.status == "error"
    finally:
        r.close()


def test_a_url_that_is_not_a_node_is_one_line(fake_node, tmp_path, capsys):
    out = tmp_path / "node.db"
    rc = main(["attach", fake_node.url("/garbled"), "--duration", "10", "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 1
    (line,) = [ln for ln in _lines(err) if "error" in ln]
    assert "is not a node's /metrics" in line
    assert out.exists()  # the recording keeps what arrived (the failed scrape)
    with sqlite3.connect(out) as conn:
        assert conn.execute("SELECT status FROM node_samples").fetchall() == [("garbled",)]


def test_a_node_that_stops_answering_is_said_once_and_the_recording_keeps_its_scrapes(
        fake_node, tmp_path, capsys):
    out = tmp_path / "node.db"
    def stop_after_two_answers() -> None:  # the scrape's process may take a second to start
        while fake_node.hits.get("/metrics", 0) < 2:
            time.sleep(0.02)
        fake_node.server.shutdown()
        fake_node.server.server_close()

    stopper = threading.Thread(target=stop_after_two_answers, daemon=True)
    stopper.start()
    rc = main(["attach", fake_node.url("/metrics"), "--interval", "0.3", "--duration", "4",
               "--timeout", "0.5", "--out", str(out), "--quiet"])
    stopper.join()
    err = capsys.readouterr().err
    assert rc == 0  # it did scrape the node
    stopped = [ln for ln in _lines(err) if "stopped answering" in ln]
    assert len(stopped) == 1, err
    with sqlite3.connect(out) as conn:
        rows = conn.execute("SELECT status FROM node_samples ORDER BY row_id").fetchall()
    assert rows[0] == ("ok",) and rows[-1] != ("ok",)


def test_bad_flags_exit_2_with_one_line(fake_node, tmp_path, capsys):
    taken = tmp_path / "taken.db"
    taken.write_bytes(b"x")
    for argv, want in [
        (["--replay", "tcp://127.0.0.1:1"], "--replay needs --kv-events"),
        (["--out", str(taken)], "already exists"),
        (["--out", str(tmp_path / "x.jsonl")], "expected a .db file"),
        (["--out", str(tmp_path / "no" / "x.db")], "does not exist"),
        (["--kv-events", "http://x:1"], "expected tcp://"),
        (["--interval", "0"], "--interval"),
    ]:
        assert main(["attach", fake_node.url("/metrics"), *argv]) == 2, argv
        err = capsys.readouterr().err.strip()
        assert want in err and len(err.splitlines()) == 1, (argv, err)
    assert taken.read_bytes() == b"x"
