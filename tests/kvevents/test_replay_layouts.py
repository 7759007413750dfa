"""Replay answers in both layouts: vLLM 0.32's `[topic, seq, payload]` and the older
`[seq, payload]` (kvviz.node.kvevents.replay), parsed alone and through a subscriber that
fills a gap and joins late."""
from __future__ import annotations

import contextlib

import pytest

from kvviz.node.kvevents.publisher import Publisher
from kvviz.node.kvevents.replay import END_SEQ, parse_answer
from kvviz.node.kvevents.subscriber import Subscriber, SubscriberConfig
from tests.kvevents.conftest import free_base_port, wait_connected
from tests.kvevents.schema_pub import SchemaPublisher, payload, remove, store

S5 = (5).to_bytes(8, "big", signed=True)
END = (-1).to_bytes(8, "big", signed=True)


@pytest.mark.parametrize("frames, want", [
    ([b"", b"kv-events", S5, b"P"], (5, b"kv-events", b"P")),  # 0.32, with a topic
    ([b"", b"", S5, b"P"], (5, b"", b"P")),  # 0.32, empty topic
    ([b"", b"", END, b""], (END_SEQ, b"", b"")),  # 0.32 end marker
    ([b"", S5, b"P"], (5, None, b"P")),  # older layout
    ([S5, b"P"], (5, None, b"P")),  # older layout without the delimiter
    ([b"", END, b""], (END_SEQ, None, b"")),
])
def test_both_answer_layouts_parse(frames, want):
    assert tuple(parse_answer(frames)) == want


@pytest.mark.parametrize("frames", [[], [b""], [b"", b"short"], [b"a", b"b", b"c", b"d", b"e"],
                                    [b"", b"t", b"notseq", b"P"]])
def test_other_answers_are_refused(frames):
    assert parse_answer(frames) is None


def _ep(port: int) -> str:
    return f"tcp://127.0.0.1:{port}"


def _drain(sub, done, rounds: int = 200) -> None:
    for _ in range(rounds):
        sub.poll(20)
        if done():
            return
    raise AssertionError(f"not done: {sub.summary()}")


@pytest.mark.parametrize("layout", ["0.32", "legacy"])
@pytest.mark.parametrize("topic", [b"", b"kv-events"])
def test_a_gap_is_filled_and_a_late_join_starts_from_seq_0(layout, topic):
    port = free_base_port(2)
    pub = SchemaPublisher(_ep(port), replay=_ep(port + 1), topic=topic, layout=layout)
    try:
        pub.send(payload([store([1, 2], None)]))  # before anyone listens: seq 0
        pub.send(payload([store([3], 2)]))  # seq 1
        sub = Subscriber(SubscriberConfig((_ep(port),), replay=(_ep(port + 1),),
                                          topic=topic.decode()))
        try:
            wait_connected(sub)
            pub.send(payload([store([4], 3)]))  # seq 2: joined late, replays 0 and 1
            pub.send(payload([remove([1])]), drop=True)  # seq 3: lost on the way
            pub.send(payload([store([5], 4)]))  # seq 4: a gap, filled from the replay
            _drain(sub, lambda: sub.streams[0].batches == 5)
            (s,) = sub.summary()
            assert s["replayed_batches"] == 3 and s["gaps"] == 1 and s["lost_batches"] == 0
            assert set(sub.model.forests[next(iter(sub.model.forests))].parent) == {2, 3, 4, 5}
            assert sub.streams[0].last_error == ""
        finally:
            sub.close()
    finally:
        pub.close()


@pytest.mark.parametrize("layout", ["0.32", "legacy"])
def test_kvviz_own_publisher_answers_in_the_layout_it_is_given(layout):
    port = free_base_port(2)
    pub = Publisher(_ep(port), _ep(port + 1), topic="t", replay_layout=layout)
    try:
        pub.publish([["BlockStored", [7], None, [1] * 4, 4]])
        sub = Subscriber(SubscriberConfig((_ep(port),), replay=(_ep(port + 1),)))
        try:
            wait_connected(sub)
            pub.publish([["BlockStored", [8], 7, [2] * 4, 4]])
            _drain(sub, lambda: sub.streams[0].batches == 2)
            assert sub.summary()[0]["replayed_batches"] == 1
            assert sub.model.cached_blocks(sub.streams[0].sid) == 2
        finally:
            sub.close()
    finally:
        pub.close()


def test_an_unknown_replay_layout_is_refused():
    with pytest.raises(ValueError, match="replay_layout"):
        Publisher("tcp://127.0.0.1:1", replay_layout="0.99")


@pytest.mark.parametrize("layout", ["0.32", "legacy"])
def test_joining_an_idle_node_shows_its_cache_before_any_new_batch(layout):
    port = free_base_port(2)
    pub = SchemaPublisher(_ep(port), replay=_ep(port + 1), layout=layout)
    try:
        pub.send(payload([store([1, 2], None)]))
        pub.send(payload([store([3], 2), remove([1])]))
        sub = Subscriber(SubscriberConfig((_ep(port),), replay=(_ep(port + 1),)))
        try:
            _drain(sub, lambda: sub.streams[0].batches == 2)  # nothing new is published
            (s,) = sub.summary()
            assert s["cached_blocks"] == 2 and s["replayed_batches"] == 2
            assert s["restarts"] == 0 and s["gaps"] == 0
        finally:
            sub.close()
    finally:
        pub.close()


def test_a_live_batch_the_join_replay_gave_already_is_neither_twice_nor_a_restart():
    port = free_base_port(2)
    pub = SchemaPublisher(_ep(port), replay=_ep(port + 1), layout="0.32")
    try:
        pub.send(payload([store([1], None)]))
        sub = Subscriber(SubscriberConfig((_ep(port),), replay=(_ep(port + 1),)))
        try:
            _drain(sub, lambda: sub.streams[0].batches == 1)
            wait_connected(sub)  # the subscription reaches the publisher (ZeroMQ slow joiner)
            st_ = sub.streams[0]
            # seq 0 arriving live after the join replay had it (published while joining)
            sub.handle(st_, [b"", (0).to_bytes(8, "big"), pub.sent[0][1]])
            pub.send(payload([store([2], 1)]))
            _drain(sub, lambda: st_.batches == 2)
            (s,) = sub.summary()
            assert (s["batches"], s["restarts"], s["gaps"], s["cached_blocks"]) == (2, 0, 0, 2)
        finally:
            sub.close()
    finally:
        pub.close()


class SlowFirstAnswer(SchemaPublisher):
    """Answers its first replay request only after `delay_s` (a busy node): later ones at
    once."""

    delay_s = 1.0

    def answer(self, first: int) -> tuple[list, bool]:
        if self.delay_s:
            self.stop.wait(self.delay_s)
            self.delay_s = 0.0
        return super().answer(first)


def test_a_join_that_waited_out_its_slice_with_nothing_is_no_loss():
    """The join replay waits JOIN_TIMEOUT_S at most: a node slower than that answers nothing
    in the first slice; the next poll's slice or the first live batch takes the cache from
    the replay socket (no backoff: nothing failed), so no batch is lost and nothing counts
    as a gap."""
    port = free_base_port(2)
    pub = SlowFirstAnswer(_ep(port), replay=_ep(port + 1), layout="0.32")
    try:
        pub.send(payload([store([1, 2], None)]))  # seq 0 and 1: before anyone listens
        pub.send(payload([store([3], 2)]))
        sub = Subscriber(SubscriberConfig((_ep(port),), replay=(_ep(port + 1),)))
        try:
            wait_connected(sub)  # the join asked, and gave up after JOIN_TIMEOUT_S
            st_ = sub.streams[0]
            assert st_.joined and st_.replayed_batches == 0, sub.summary()
            pub.send(payload([store([4], 3)]))  # seq 2: the first live batch
            _drain(sub, lambda: st_.batches == 3)
            (s,) = sub.summary()
            # seq 2 came replayed too when a poll's slice was answered after it was sent
            assert s["replayed_batches"] in (2, 3) and s["lost_batches"] == s["gaps"] == 0, s
            assert s["cached_blocks"] == 4
        finally:
            sub.close()
    finally:
        pub.close()


class CutFirstAnswer(SchemaPublisher):
    """Answers its first replay request with its first `give` batches and no end marker (a
    busy node whose join answer the subscriber's wait cut short); later ones in full."""

    give: int | None = 2

    def answer(self, first: int) -> tuple[list, bool]:
        todo, _ = super().answer(first)
        if self.give is None:
            return todo, True
        give, self.give = self.give, None
        return todo[:give], False


@contextlib.contextmanager
def _cut_join():
    """A subscriber joining a node of 4 batches (seq 0..3) whose first join answer is cut
    after 2: yields (publisher, subscriber, its stream)."""
    port = free_base_port(2)
    pub = CutFirstAnswer(_ep(port), replay=_ep(port + 1), layout="0.32")
    try:
        pub.send(payload([store([1, 2], None)]))  # seq 0..3: before anyone listens
        pub.send(payload([store([3], 2)]))
        pub.send(payload([store([4], 3)]))
        pub.send(payload([store([5], 4)]))
        sub = Subscriber(SubscriberConfig((_ep(port),), replay=(_ep(port + 1),)))
        try:
            yield pub, sub, sub.streams[0]
        finally:
            sub.close()
    finally:
        pub.close()


def test_a_join_cut_short_goes_on_at_the_next_poll_on_an_idle_node():
    """The join's first slice takes 2 of 4 batches and waits out JOIN_TIMEOUT_S: with no live
    batch to come (an idle node), the next polls ask for the rest, so the subscriber holds
    the node's whole cache, with no gap and nothing lost."""
    with _cut_join() as (_pub, sub, st_):
        _drain(sub, lambda: st_.batches == 4)
        (s,) = sub.summary()
        assert (s["replayed_batches"], s["gaps"], s["lost_batches"]) == (4, 0, 0), s
        assert s["cached_blocks"] == 5 and not st_.join_more


def test_the_rest_of_a_join_cut_short_is_no_gap_when_a_live_batch_takes_it():
    """A live batch that arrives before the polls took the join's rest fills it from the
    replay socket: the rest of a join, not a gap."""
    with _cut_join() as (pub, sub, st_):
        wait_connected(sub)  # the join's first slice: 2 batches, then its wait ran out
        assert st_.joined and st_.replayed_batches == 2 and st_.join_more, sub.summary()
        st_.join_idle = 99  # the polls leave the rest alone: the live batch takes it
        pub.send(payload([store([6], 5)]))  # seq 4
        _drain(sub, lambda: st_.batches == 5)
        (s,) = sub.summary()
        assert (s["replayed_batches"], s["gaps"], s["lost_batches"]) == (4, 0, 0), s
        assert s["cached_blocks"] == 6 and not st_.join_more
