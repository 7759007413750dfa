"""The kv_* tables: a recording rebuilds the same caches the subscriber held when it stopped."""
from __future__ import annotations

from kvviz.node.kvevents.rebuild import load_model
from kvviz.node.kvevents.subscriber import Subscriber, SubscriberConfig
from kvviz.store import kv_reader
from kvviz.store.writer import RunWriter
from tests.kvevents.conftest import free_base_port
from tests.kvevents.schema_pub import clear, payload, remove
from tests.kvevents.schema_pub import store as stored


def test_a_recording_rebuilds_what_the_subscriber_held(tmp_path):
    w = RunWriter(tmp_path / "r.db", {"mode": "kv-events"})
    kv = w.kv_events()
    port = free_base_port(2)
    sub = Subscriber(SubscriberConfig((f"tcp://127.0.0.1:{port}",), dp_ranks=2), kv)
    a, b = sub.streams
    msgs = [(a, 0, payload([stored([1, 2, 3], None)])), (b, 0, payload([stored([1], None)])),
            (a, 1, b"garbage"), (a, 2, payload([remove([3]), stored([4], 2)])),
            (a, 5, payload([stored([5], 4)])),  # a gap, no replay
            (a, 0, payload([stored([7], None)])),  # a restart
            (b, 1, payload([clear(), stored([8], None, enc="array")], envelope="map")),
            (a, 1, payload([stored([9], 7)]))]
    for st, seq, data in msgs:
        sub.handle(st, [b"", seq.to_bytes(8, "big"), data])
    kv.flush()
    w.commit()
    conn = kv_reader.connect(tmp_path / "r.db")
    model, last = load_model(conn)
    assert {k: f.parent for k, f in model.forests.items()} == \
        {k: f.parent for k, f in sub.model.forests.items()}
    assert last == conn.execute("SELECT MAX(batch_id) FROM kv_batches").fetchone()[0]
    counts = kv_reader.stream_counts(conn)
    assert counts[a.sid]["gaps"] == 1 and counts[a.sid]["lost_batches"] == 2
    assert counts[a.sid]["restarts"] == 1 and counts[a.sid]["undecodable"] == 1
    assert [g["kind"] for g in kv_reader.gaps(conn)] == ["gap", "restart"]
    sub.close()
    w.close()


def test_loading_in_steps_equals_loading_at_once(tmp_path):
    w = RunWriter(tmp_path / "r.db", {"mode": "kv-events"})
    kv = w.kv_events()
    sub = Subscriber(SubscriberConfig((f"tcp://127.0.0.1:{free_base_port(1)}",)), kv)
    (st,) = sub.streams
    conn = kv_reader.connect(tmp_path / "r.db")
    step, last = None, 0
    for seq in range(6):
        data = payload([stored([seq + 10], seq + 9 if seq else None)] +
                       ([remove([seq + 8])] if seq > 1 else []))
        sub.handle(st, [b"", (seq % 4).to_bytes(8, "big"), data])  # restarts at seq 4
        kv.flush()
        w.commit()
        step, last = load_model(conn, last, step)
    whole, _ = load_model(conn)
    assert {k: f.parent for k, f in step.forests.items()} == \
        {k: f.parent for k, f in whole.forests.items()}
    sub.close()
    w.close()


def test_a_model_read_in_pieces_equals_one_read_at_once(tmp_path):
    from tests.kvevents.recordings import write_kv_recording

    write_kv_recording(tmp_path / "ev.db", free_base_port(2))
    with kv_reader.connect(tmp_path / "ev.db") as conn:
        whole, end = load_model(conn)
        model, last, pieces = None, 0, 0
        while last < end:
            model, last = load_model(conn, last, model, limit=3)
            pieces += 1
    assert pieces > 3
    assert {k: f.parent for k, f in model.forests.items()} == \
        {k: f.parent for k, f in whole.forests.items()}
