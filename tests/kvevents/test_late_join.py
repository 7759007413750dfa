"""A join that misses batches never counts a block the node may have dropped: a lost batch
makes what was cached before it unconfirmed (kvviz.node.kvevents.model), and a replay answer
with a hole is asked again from the hole (kvviz.node.kvevents.replay)."""
from __future__ import annotations

import zmq
from hypothesis import given, settings
from hypothesis import strategies as st

from kvviz.node.kvevents.decode import CLEARED, REMOVED, STORED, Event
from kvviz.node.kvevents.model import CacheModel
from kvviz.node.kvevents.rebuild import rebuild
from kvviz.node.kvevents.replay import fetch
from tests.examples import examples
from tests.kvevents.conftest import free_base_port
from tests.kvevents.schema_pub import SchemaPublisher, payload, remove, store

_h = st.integers(0, 12)
_ev = st.one_of(
    st.builds(lambda hs, p: Event(STORED, hs, p, None, 4, None, 0),
              st.lists(_h, min_size=1, max_size=4), st.none() | _h),
    st.builds(lambda hs: Event(REMOVED, hs, None, None, 0, None, 0), st.lists(_h, max_size=4)),
    st.just(Event(CLEARED, [], None, None, 0, None, 0)))


def _counted(m: CacheModel) -> set:
    return {h for _, f in m.of_stream(1) for h in f.parent}


@settings(max_examples=examples(80), deadline=None)
@given(st.lists(st.tuples(st.lists(_ev, max_size=4), st.booleans()), max_size=14),
       st.integers(0, 5))
def test_a_model_that_lost_batches_counts_only_blocks_the_node_holds(batches, start):
    """The node's truth is every batch applied; the model sees those not lost from `start`
    on (a late join's window): what it counts is always held by the node, and is exactly
    the blocks stored (or re-announced) in the batches seen since the last one lost."""
    m = CacheModel()
    last = -1  # the node's state is compared after the last batch the model saw
    since: list = []  # the batches seen since the last loss
    for seq, (evs, lost) in enumerate(batches):
        if seq < start or lost:
            continue
        if last >= 0 and seq > last + 1:
            since = []
        m.note_seq(1, seq)
        m.apply(1, 0, evs, float(seq))
        last = seq
        since.append(evs)
    assert m.forests == {} or [f.parent for _, f in m.of_stream(1)][0] == \
        rebuild(e for evs in since for e in evs)
    truth = rebuild(e for evs, _ in batches[:last + 1] for e in evs)
    assert _counted(m) <= set(truth)
    n = m.cached_blocks(1)
    assert m.n_cached == n and n == len(_counted(m))
    if not any(lost for _, lost in batches[start:last + 1]) and start == 0:
        assert _counted(m) == set(truth)


def test_a_re_announced_block_counts_again_and_its_removal_is_known():
    m = CacheModel()
    m.note_seq(1, 0)
    m.apply(1, 0, [Event(STORED, [1, 2, 3], None, None, 4, None, 0)], 0.0)
    m.note_seq(1, 2)  # seq 1 lost: 1, 2, 3 may be gone
    assert (m.cached_blocks(1), m.unconfirmed_blocks(1)) == (0, 3)
    m.apply(1, 0, [Event(STORED, [1], None, None, 4, None, 0),  # a prefix hit re-announces
                   Event(REMOVED, [3], None, None, 0, None, 0)], 1.0)
    (f,) = m.forests.values()
    assert set(f.parent) == {1} and set(f.unconfirmed) == {2}
    assert f.unknown_removals == 0 and f.cached_tokens == 4


class DropsOnce(SchemaPublisher):
    """A ROUTER whose first answer loses `dropped` on the way (its send queue was full)."""

    dropped = (3, 4)

    def _serve(self) -> None:
        end = (-1).to_bytes(8, "big", signed=True)
        while not self.stop.is_set():
            if not self.router.poll(50):
                continue
            ident, _empty, start = self.router.recv_multipart()
            first = int.from_bytes(start, "big", signed=True)
            with self.lock:
                todo = [x for x in self.sent if x[0] >= first and x[0] not in self.dropped]
            self.dropped = ()
            for s, p in todo:
                self.router.send_multipart([ident, b"", self.topic, s.to_bytes(8, "big"), p])
            self.router.send_multipart([ident, b"", b"", end, b""])


def test_an_answer_with_a_hole_is_asked_again_from_the_hole():
    port = free_base_port(2)
    pub = DropsOnce(f"tcp://127.0.0.1:{port}", replay=f"tcp://127.0.0.1:{port + 1}",
                    layout="0.32")
    ctx = zmq.Context()
    try:
        for i in range(8):
            pub.send(payload([store([i], None)]), drop=True)
        seqs: list[int] = []
        res = fetch(ctx, f"tcp://127.0.0.1:{port + 1}", 0, 2**62, timeout_s=5.0,
                    frame_bytes=1 << 20, topic=b"", should_stop=lambda: False,
                    take=lambda a: seqs.append(a.seq))
        assert res.ok and seqs == list(range(8)) and res.asked == 2 and res.skipped == 0
    finally:
        ctx.term()
        pub.close()


class OldBuffer(SchemaPublisher):
    """A replay buffer that no longer holds seqs below `oldest` (vLLM keeps 10,000)."""

    oldest = 3

    def _serve(self) -> None:
        end = (-1).to_bytes(8, "big", signed=True)
        while not self.stop.is_set():
            if not self.router.poll(50):
                continue
            ident, _empty, start = self.router.recv_multipart()
            first = int.from_bytes(start, "big", signed=True)
            with self.lock:
                todo = [x for x in self.sent if x[0] >= max(first, self.oldest)]
            for s, p in todo:
                self.router.send_multipart([ident, b"", self.topic, s.to_bytes(8, "big"), p])
            self.router.send_multipart([ident, b"", b"", end, b""])


def test_a_join_whose_window_began_late_counts_no_block_removed_before_it():
    """Blocks stored and removed before the window are never seen; removals inside the window
    of blocks stored before it are unknown, never negative; the count is what the window
    proves."""
    from kvviz.node.kvevents.subscriber import Subscriber, SubscriberConfig
    from tests.kvevents.test_replay_layouts import _drain
    port = free_base_port(2)
    pub = OldBuffer(f"tcp://127.0.0.1:{port}", replay=f"tcp://127.0.0.1:{port + 1}",
                    layout="0.32")
    try:
        pub.send(payload([store([1, 2], None)]), drop=True)  # 0
        pub.send(payload([store([3], 2)]), drop=True)  # 1
        pub.send(payload([remove([1, 2])]), drop=True)  # 2
        pub.send(payload([store([4], 3), remove([3])]), drop=True)  # 3: the window begins
        pub.send(payload([store([5], 4)]), drop=True)  # 4
        sub = Subscriber(SubscriberConfig((f"tcp://127.0.0.1:{port}",),
                                          replay=(f"tcp://127.0.0.1:{port + 1}",)))
        try:
            _drain(sub, lambda: sub.streams[0].batches == 2)
            (s,) = sub.summary()
            assert s["cached_blocks"] == 2 and s["unconfirmed_blocks"] == 0
            (f,) = sub.model.forests.values()
            assert set(f.parent) == {4, 5} and f.unknown_removals == 1
        finally:
            sub.close()
    finally:
        pub.close()
