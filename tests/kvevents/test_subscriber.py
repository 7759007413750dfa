"""The subscriber over real ZMQ sockets on 127.0.0.1, fed by the schema-built test publisher."""
from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvviz.node.kvevents.subscriber import Subscriber, SubscriberConfig
from tests.examples import examples
from tests.kvevents.conftest import drain, free_base_port, wait_connected
from tests.kvevents.schema_pub import SchemaPublisher, clear, payload, remove, store


def _ep(port: int) -> str:
    return f"tcp://127.0.0.1:{port}"


@pytest.fixture
def one():
    port = free_base_port(2)
    pub = SchemaPublisher(_ep(port), replay=_ep(port + 1))
    sub = Subscriber(SubscriberConfig((_ep(port),), replay=(_ep(port + 1),)))
    wait_connected(sub)
    yield pub, sub
    sub.close()
    pub.close()


@pytest.mark.parametrize("enc", ["map", "array"])
@pytest.mark.parametrize("hashes", [[11, 12, 13], [b"a" * 32, b"b" * 32, b"c" * 32]])
def test_both_encodings_and_hash_kinds_rebuild_the_cache(one, enc, hashes):
    pub, sub = one
    pub.send(payload([store(hashes, None, enc=enc)]))
    pub.send(payload([remove(hashes[2:], enc)], envelope="map"))
    drain(sub, lambda: sub.streams[0].batches == 2)
    (s,) = sub.summary()
    assert s["encoding"] == enc and s["cached_blocks"] == 2 and s["cached_tokens"] == 8
    assert s["stored_blocks"] == 3 and s["removed_blocks"] == 1


def test_a_dropped_batch_is_filled_from_the_replay_socket(one):
    pub, sub = one
    pub.send(payload([store([1], None)]))
    pub.send(payload([store([2], 1)]), drop=True)
    pub.send(payload([store([3], 2)]))
    drain(sub, lambda: sub.streams[0].batches == 3)
    (s,) = sub.summary()
    assert s["gaps"] == 1 and s["replayed_batches"] == 1 and s["lost_batches"] == 0
    assert s["cached_blocks"] == 3


def test_without_replay_a_gap_is_recorded():
    port = free_base_port(1)
    pub = SchemaPublisher(_ep(port))
    sub = Subscriber(SubscriberConfig((_ep(port),)))
    try:
        wait_connected(sub)
        pub.send(payload([store([1], None)]))
        pub.send(payload([store([2], 1)]), drop=True)
        pub.send(payload([store([2], 1)]), drop=True)
        pub.send(payload([store([3], 2)]))
        drain(sub, lambda: sub.streams[0].batches == 2)
        (s,) = sub.summary()
        assert s["gaps"] == 1 and s["lost_batches"] == 2 and s["replayed_batches"] == 0
    finally:
        sub.close()
        pub.close()


def test_a_publisher_restart_clears_the_stream_cache(one):
    pub, sub = one
    pub.send(payload([store([1, 2], None)]))
    pub.send(payload([store([3], 2)]))
    pub.send(payload([store([7], None)]), seq=0)
    drain(sub, lambda: sub.streams[0].batches == 3)
    (s,) = sub.summary()
    assert s["restarts"] == 1 and s["cached_blocks"] == 1 and s["gaps"] == 0


def test_unknown_tags_and_garbage_are_counted_never_fatal(one):
    pub, sub = one
    pub.send(b"\x00garbage")
    pub.send(payload([{"type": "BlockMoved"}, store([1], None), clear()]))
    pub.pub.send_multipart([b"only-one-frame"])
    pub.send(payload([store([2], None)]))
    drain(sub, lambda: sub.streams[0].batches == 2 and sub.streams[0].undecodable == 2)
    (s,) = sub.summary()
    assert s["unknown_events"] == 1 and s["cleared"] == 1 and s["cached_blocks"] == 1


def test_several_dp_ranks_are_separate_streams():
    port = free_base_port(3)
    pubs = [SchemaPublisher(_ep(port + r)) for r in range(3)]
    sub = Subscriber(SubscriberConfig((_ep(port),), dp_ranks=3))
    try:
        wait_connected(sub)
        for r, p in enumerate(pubs):
            p.send(payload([store(list(range(r + 1)), None, enc="array")], rank=r))
        drain(sub, lambda: all(s.batches == 1 for s in sub.streams))
        got = {s["dp_rank"]: s["cached_blocks"] for s in sub.summary()}
        assert got == {0: 1, 1: 2, 2: 3}
    finally:
        sub.close()
        for p in pubs:
            p.close()


def test_a_100k_event_batch(one):
    pub, sub = one
    pub.send(payload([store([i], None, block_size=1, tokens=[i]) for i in range(100_000)]))
    drain(sub, lambda: sub.streams[0].batches == 1, timeout=30)
    (s,) = sub.summary()
    assert s["events"] == 100_000 and s["cached_blocks"] == 100_000


def test_a_wrong_topic_is_named():
    port = free_base_port(1)
    pub = SchemaPublisher(_ep(port), topic=b"kv@pod-a")
    sub = Subscriber(SubscriberConfig((_ep(port),), topic="other"))
    try:
        wait_connected(sub)
        pub.send(payload([store([1], None)]))
        drain(sub, lambda: sub.streams[0].wrong_topic == 1)
        ((definitive, msg),) = sub.problems().values()
        assert definitive and "kv@pod-a" in msg and "other" in msg
    finally:
        sub.close()
        pub.close()


def test_a_non_kv_publisher_is_named(one):
    pub, sub = one
    pub.send(b'{"hello": "world"}')
    drain(sub, lambda: sub.streams[0].undecodable == 1)
    ((definitive, msg),) = sub.problems().values()
    assert definitive and "not a KV-event publisher" in msg


def test_an_unreachable_endpoint_says_it_cannot_connect():
    port = free_base_port(1)
    sub = Subscriber(SubscriberConfig((_ep(port),)))
    try:
        end = time.monotonic() + 0.5
        while time.monotonic() < end:
            sub.poll(50)
        ((definitive, msg),) = sub.problems().values()
        assert not definitive and "cannot connect" in msg
    finally:
        sub.close()


@pytest.mark.parametrize("bad", ["http://x:1", "tcp://nohost", "tcp://h:notaport", "5557"])
def test_bad_endpoints_are_refused_with_one_message(bad):
    with pytest.raises(ValueError, match="expected tcp://"):
        SubscriberConfig((bad,))


def test_a_late_subscriber_takes_earlier_batches_from_the_replay_buffer():
    port = free_base_port(2)
    pub = SchemaPublisher(_ep(port), replay=_ep(port + 1))
    try:
        pub.send(payload([store([1, 2], None)]))  # nobody listens yet
        sub = Subscriber(SubscriberConfig((_ep(port),), replay=(_ep(port + 1),)))
        try:
            wait_connected(sub)
            pub.send(payload([store([3], 2)]))
            drain(sub, lambda: sub.streams[0].batches == 2)
            (s,) = sub.summary()
            assert s["cached_blocks"] == 3 and s["replayed_batches"] == 1 and s["gaps"] == 0
        finally:
            sub.close()
    finally:
        pub.close()


def test_a_host_that_does_not_resolve_is_named():
    sub = Subscriber(SubscriberConfig(("tcp://no-such-host.invalid:5557",)))
    try:
        sub.poll(50)
        ((definitive, msg),) = sub.problems().values()
        assert not definitive and "does not resolve" in msg
    finally:
        sub.close()


@settings(max_examples=examples(60), deadline=None)
@given(st.lists(st.text(max_size=30) | st.sampled_from(["tcp://127.0.0.1:1", "ipc:///tmp/x",
                                                          "tcp://[::1]:9", "tcp://*:1"]),
                min_size=1, max_size=3), st.integers(-2, 70))
def test_any_endpoint_list_is_accepted_or_refused_with_one_message(eps, ranks):
    try:
        SubscriberConfig(tuple(eps), ranks)
    except ValueError as exc:
        assert str(exc) and "\n" not in str(exc)


_frames = st.lists(st.binary(max_size=24) | st.sampled_from(
    [b"", (5).to_bytes(8, "big"), (0).to_bytes(8, "big"), payload([store([1], None)]),
     payload([remove([1]), clear()], envelope="map"), b"\x92\xcb"]), max_size=4)


@settings(max_examples=examples(60), deadline=None)
@given(st.lists(_frames, max_size=8))
def test_any_message_is_counted_never_raised(messages):
    port = free_base_port(1)
    sub = Subscriber(SubscriberConfig((_ep(port),)))
    try:
        st_ = sub.streams[0]
        for frames in messages:
            sub.handle(st_, frames)
        (s,) = sub.summary()
        assert s["batches"] + s["undecodable"] <= len(messages)
        assert s["cached_blocks"] >= 0
    finally:
        sub.close()


def test_a_restart_right_after_the_first_batch_is_seen(one):
    pub, sub = one
    pub.send(payload([store([1], None)]))
    pub.send(payload([store([9], None)]), seq=0)
    drain(sub, lambda: sub.streams[0].batches == 2)
    (s,) = sub.summary()
    assert s["restarts"] == 1 and s["cached_blocks"] == 1
