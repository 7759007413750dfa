"""`kvviz events`: records a stream, prints --json summaries, refuses bad input with one line."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvviz.commands import events
from kvviz.commands.cli import main
from kvviz.node.kvevents.rebuild import load_model
from kvviz.store import kv_reader
from tests.examples import examples
from tests.kvevents.conftest import free_base_port
from tests.kvevents.schema_pub import SchemaPublisher, payload, publish_for, remove
from tests.kvevents.schema_pub import store as stored

KEYS = {"endpoint", "dp_rank", "encoding", "batches", "events", "stored_blocks",
        "removed_blocks", "cleared", "cached_blocks", "cached_tokens", "gaps",
        "replayed_batches", "undecodable"}


def _kvviz(*args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    return subprocess.run([sys.executable, "-m", "kvviz", "events", *args], capture_output=True,
                          text=True, timeout=timeout, env=env)


def test_records_and_prints_one_json_object_per_stream(tmp_path):
    port = free_base_port(1)
    pub = SchemaPublisher(f"tcp://127.0.0.1:{port}")
    out = tmp_path / "ev.db"
    th = publish_for(pub, 30.0, lambda i: payload(
        [stored([i], None)] + ([remove([i - 1])] if i % 2 else [])))
    try:  # 50 ms a batch: ~24 in 1.2 s
        r = _kvviz(f"tcp://127.0.0.1:{port}", "--duration", "1.2", "--json", "--quiet",
                   "--out", str(out))
    finally:
        pub.stop.set()
        th.join()
        pub.close()
    assert r.returncode == 0, r.stderr
    (line,) = r.stdout.splitlines()
    s = json.loads(line)
    assert KEYS <= s.keys() and s["batches"] > 5 and s["encoding"] == "map"
    conn = kv_reader.connect(out)
    model, _ = load_model(conn)
    assert model.cached_blocks(1) == s["cached_blocks"]
    assert kv_reader.streams(conn)[0]["summary"]["events"] == s["events"]


# In process, with the wait before a quiet stream is judged (3 s) cut to WAIT s
WAIT = 0.3


def test_a_non_kv_publisher_exits_2_once_the_wait_is_over(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(events, "WAIT_S", WAIT)
    port = free_base_port(1)
    pub = SchemaPublisher(f"tcp://127.0.0.1:{port}")
    th = publish_for(pub, 30.0, lambda i: b"hello, I am a chat server")
    t0 = time.monotonic()
    try:
        code = main(["events", f"tcp://127.0.0.1:{port}", "--out", str(tmp_path / "x.db"),
                     "--quiet"])
    finally:
        pub.stop.set()
        th.join()
        pub.close()
    err = capsys.readouterr().err
    assert code == 2 and WAIT <= time.monotonic() - t0 < WAIT + 5
    assert err.strip().startswith("kvviz events: error:")
    assert "not a KV-event publisher" in err


def test_an_unreachable_endpoint_warns_and_records_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(events, "WAIT_S", WAIT)
    port = free_base_port(1)
    code = main(["events", f"tcp://127.0.0.1:{port}", "--out", str(tmp_path / "x.db"),
                 "--duration", str(3 * WAIT), "--quiet", "--json"])
    out, err = capsys.readouterr()
    assert code == 0
    assert "kvviz events: warning:" in err and "cannot connect" in err
    assert json.loads(out)["batches"] == 0


def test_an_existing_out_file_is_never_overwritten(tmp_path, capsys):
    out = tmp_path / "keep.db"
    out.write_bytes(b"mine")
    assert main(["events", "tcp://127.0.0.1:1", "--out", str(out)]) == 2
    assert out.read_bytes() == b"mine"
    assert "already exists" in capsys.readouterr().err


_arg = st.sampled_from(["tcp://127.0.0.1:1", "tcp://x", "ipc://", "--dp-ranks", "0", "-3",
                        "--replay", "--duration", "nan", "--topic", "", "http://a:1", "1e9"])


@settings(max_examples=examples(30), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(_arg, max_size=5))
def test_any_arguments_give_a_result_or_one_clear_error(tmp_path, argv):
    out = tmp_path / f"f{abs(hash(tuple(argv)))}.db"
    argv = [a for a in argv if a != "--duration"] + ["--duration", "0.05", "--out", str(out)]
    try:
        code = main(["events", *argv])
    except SystemExit as exc:  # argparse: usage + one error line
        code = exc.code
    assert code in (0, 2)


def test_kvviz_collect_publishes_what_kvviz_events_records(tmp_path):
    port = free_base_port(2)
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    ev = subprocess.Popen([sys.executable, "-m", "kvviz", "events", f"tcp://127.0.0.1:{port}",
                           "--duration", "60", "--json", "--quiet", "--out",
                           str(tmp_path / "e.db")], env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)  # listens first: ZMQ reconnects
    try:
        time.sleep(0.3)
        col = subprocess.run([sys.executable, "-m", "kvviz", "collect", "--mode", "sim",
                              "--lane", "paged:16:prefix", "--prefix-sharing", "0.8", "--rate",
                              "50", "--kv-events", f"tcp://127.0.0.1:{port}",
                              "--kv-events-format", "sglang", "--duration", "2", "--quiet",
                              "--out", str(tmp_path / "c.db")], env=env, capture_output=True,
                             text=True, timeout=60)
        time.sleep(0.5)  # the last batches on the way
    finally:
        ev.terminate()  # SIGTERM: `kvviz events` stops, writes its summary and exits 0
        out, err = ev.communicate(timeout=30)
    assert col.returncode == 0, col.stderr
    assert ev.returncode == 0, err
    s = json.loads(out)
    assert s["encoding"] == "array" and s["stored_blocks"] > 0 and s["cached_blocks"] > 0


def test_collect_kv_events_needs_a_prefix_caching_lane(tmp_path):
    out = tmp_path / "c.db"
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    r = subprocess.run([sys.executable, "-m", "kvviz", "collect", "--mode", "sim", "--lane",
                        "paged:16", "--kv-events", "tcp://127.0.0.1:1", "--duration", "1",
                        "--out", str(out)], capture_output=True, text=True, env=env,
                       timeout=60)
    assert r.returncode == 2 and not out.exists()
    assert r.stderr.strip() == ("kvviz collect: error: --kv-events: no lane caches prefixes; "
                                "add one such as --lane paged:16:prefix")
